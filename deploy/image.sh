#!/bin/sh
# Builds the egressd container image that deploy/kubernetes names,
# ghcr.io/egressd/egressd:<the VERSION file>, from the Dockerfile, with that
# version stamped into the binary (egressd version, egressd_build_info).
#
#   deploy/image.sh            build (docker, or another CLI as $DOCKER)
#   deploy/image.sh kind       build, then load into a kind cluster ($KIND_CLUSTER, default "kind")
#   deploy/image.sh k3d        build, then import into a k3d cluster ($K3D_CLUSTER, default "k3s-default")
#
# $EGRESSD_IMAGE replaces the repository part (a registry of your own: push it there).
set -eu
cd "$(dirname "$0")/.."
version=$(cat VERSION)
image="${EGRESSD_IMAGE:-ghcr.io/egressd/egressd}:$version"
case "${1:-}" in
"" | kind | k3d) ;;
*)
	echo "usage: deploy/image.sh [kind|k3d]" >&2
	exit 2
	;;
esac
"${DOCKER:-docker}" build --build-arg "VERSION=$version" -t "$image" .
case "${1:-}" in
kind) kind load docker-image "$image" --name "${KIND_CLUSTER:-kind}" ;;
k3d) k3d image import "$image" --cluster "${K3D_CLUSTER:-k3s-default}" ;;
esac
echo "$image"

// Package deploy holds no code: its tests check the deployment files — the
// Dockerfile and .dockerignore at the top of the repository, the systemd unit
// in configs/, and the Kubernetes manifests in deploy/kubernetes/ — against
// each other and against egressd itself (flags that exist, a policy that
// parses, walls that nft would accept), since none of them can be run here.
package deploy

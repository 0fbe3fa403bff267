// Package deploy holds no code: its tests check the deployment files — the
// Dockerfile and .dockerignore at the top of the repository, the image
// script (deploy/image.sh) and VERSION, the systemd unit in configs/, the
// Kubernetes manifests in deploy/kubernetes/, the Prometheus alerting rules
// in deploy/prometheus/ and the Grafana dashboard in deploy/grafana/ —
// against each other and against egressd itself (flags that exist, a
// policy that parses, walls that nft would accept, metrics the code
// exports, what `egressd init --sandbox` writes), since none of them can be
// run here.
package deploy

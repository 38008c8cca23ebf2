// Package deploy holds what runs `trellis serve` in production, beside the
// command it packages: the image's Dockerfile and the script that
// assembles its context (image.sh, run by `make image`), a compose file
// with PostgreSQL (compose.yaml), Kubernetes manifests (kubernetes/) and
// the schemas make deploy-check validates them against offline
// (kubeconform/). It has no Go code of its own but the schemas'
// generator: its tests build the image and serve an interview from it,
// and hold the files to what the server does (its probes, its stop
// timeout, its connections, its network).
//
// They live here, under cmd/trellis, because the repository's top level
// is fixed and they describe how to run this command and nothing else.
package deploy

// Package imagebuild assembles container images without Docker, a registry or a pulled
// base image: every layer is written here, from host files and bytes, and the image is
// put together with go-containerregistry. hack/node-images builds the node's images with
// it, hack/release the switchboard image of a release (both as the Dockerfile builds it:
// a static binary, user 65532, no shell).
//
// It owns the layer format (reproducible tars: fixed times, numeric owners, sorted
// paths), the image config and the distroless-like base layer. It must not pull, push or
// run anything: writing the image out (a docker archive, an OCI layout) is the caller's.
package imagebuild

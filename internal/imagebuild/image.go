package imagebuild

import (
	"context"
	"debug/elf"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// NonRoot is distroless's nonroot user and group, numeric so that runAsNonRoot can
	// judge it without /etc/passwd.
	NonRoot = "65532:65532"
	// SwitchboardPath is where the switchboard image holds the binary, its entrypoint.
	SwitchboardPath = "/switchboard"
	// createdBy is what an image's history says made each layer.
	createdBy = "github.com/switchboard-mcp/switchboard/internal/imagebuild"
)

// Env is the environment of an image on BaseLayer, as distroless sets it.
var Env = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
}

// MediaTypes says which media types an image's manifest, config and layers carry.
type MediaTypes int

const (
	// Docker media types (schema 2), those a docker archive keeps: an image written to
	// one and read back has the digest it was built with.
	Docker MediaTypes = iota
	// OCI media types, those of an OCI image layout.
	OCI
)

// Config is what an image's config says of the container it runs.
type Config struct {
	// User is "uid:gid" (numeric, so that runAsNonRoot can judge it without
	// /etc/passwd), or empty for root.
	User       string
	Entrypoint []string
	Cmd        []string
	Env        []string
	Labels     map[string]string
}

// Build assembles an image for platform of layers, in order, on no base, with cfg as
// its container config and the media types mt. Each layer is written, uncompressed, into
// a file in tmp, which must outlive the image: the image reads it until it is written
// out.
func Build(tmp string, platform v1.Platform, layers []Layer, cfg Config, mt MediaTypes) (v1.Image, error) {
	base, layerType := empty.Image, types.DockerLayer
	if mt == OCI {
		base = mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
		layerType = types.OCILayer
	}
	addenda := make([]mutate.Addendum, 0, len(layers))
	for _, l := range layers {
		f, err := os.CreateTemp(tmp, "layer-*.tar")
		if err != nil {
			return nil, err
		}
		err = writeLayer(f, l.Files)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("layer %q: %w", l.Comment, err)
		}
		// Compressed once, for the digest, and kept for the tarball.
		lay, err := tarball.LayerFromFile(f.Name(), tarball.WithCompressedCaching, tarball.WithMediaType(layerType))
		if err != nil {
			return nil, fmt.Errorf("layer %q: %w", l.Comment, err)
		}
		addenda = append(addenda, mutate.Addendum{
			Layer:   lay,
			History: v1.History{Created: v1.Time{Time: Epoch}, CreatedBy: createdBy, Comment: l.Comment},
		})
	}
	img, err := mutate.Append(base, addenda...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = platform.Architecture
	cf.Variant = platform.Variant
	cf.OS = platform.OS
	cf.Created = v1.Time{Time: Epoch}
	cf.Config = v1.Config{
		User:       cfg.User,
		Entrypoint: cfg.Entrypoint,
		Cmd:        cfg.Cmd,
		Env:        cfg.Env,
		Labels:     cfg.Labels,
	}
	return mutate.ConfigFile(img, cf)
}

// Switchboard assembles the switchboard image for platform as the Dockerfile builds it:
// base (BaseLayer), then the static binary bin at /switchboard; ENTRYPOINT
// ["/switchboard"], CMD ["manager"], USER 65532:65532, no shell; media types mt. labels
// are added to the Dockerfile's, or replace them.
func Switchboard(tmp string, platform v1.Platform, base Layer, bin string, labels map[string]string, mt MediaTypes) (v1.Image, error) {
	all := map[string]string{
		"org.opencontainers.image.title":       "switchboard",
		"org.opencontainers.image.description": "Kubernetes operator for MCP server connections",
		"org.opencontainers.image.source":      "https://github.com/switchboard-mcp/switchboard",
	}
	maps.Copy(all, labels)
	return Build(tmp, platform, []Layer{base, BinaryLayer(bin, SwitchboardPath)}, Config{
		User: NonRoot, Entrypoint: []string{SwitchboardPath}, Cmd: []string{"manager"}, Env: Env, Labels: all,
	}, mt)
}

// machines are the ELF machines of the architectures images are built for.
var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// CheckArch fails unless bin is an ELF executable for the Go architecture arch (amd64
// or arm64).
func CheckArch(bin, arch string) error {
	want, ok := machines[arch]
	if !ok {
		return fmt.Errorf("architecture %q: not amd64 or arm64", arch)
	}
	f, err := elf.Open(bin)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if f.Machine != want {
		return fmt.Errorf("%s: %s, not %s", bin, f.Machine, want)
	}
	return nil
}

// GoBuild builds the package pkg of the module in dir into out for linux/arch, static
// (no cgo) and stripped, without build paths, as the Dockerfile builds switchboard.
// go's errors go to stderr.
func GoBuild(ctx context.Context, dir, pkg, out, arch string, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOWORK=off")
	cmd.Stderr = stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for linux/%s: %w", pkg, arch, err)
	}
	return nil
}

// Command release writes a Switchboard release into a folder, pushing nothing:
//
//   - switchboard-VERSION.oci.tar: the switchboard image for linux/amd64 and
//     linux/arm64 as an OCI image layout in a tar (what `docker buildx build --output
//     type=oci` writes; `skopeo copy --all oci-archive:FILE docker://REF` pushes it, as
//     does `crane push` of the unpacked folder).
//     Its index.json names one image index, tagged VERSION, of the two images, each
//     assembled as the Dockerfile builds it (internal/imagebuild): the static binary at
//     /switchboard, USER 65532:65532, no shell, the host's CA bundle.
//   - switchboard-VERSION.tgz: the Helm chart (charts/switchboard) packaged with
//     `go tool helm package`, its version and appVersion set to VERSION, so that it
//     installs the image of this release.
//   - SHA256SUMS: the SHA-256 of both, as sha256sum writes them (`sha256sum -c
//     SHA256SUMS` in the folder checks them).
//
// `make release VERSION=X.Y.Z` runs it into dist/.
package main

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/Masterminds/semver/v3"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/switchboard-mcp/switchboard/internal/imagebuild"
)

const (
	// sumsName is the checksum file's name in the output folder.
	sumsName = "SHA256SUMS"
	// chartPath is the chart's folder in the module.
	chartPath = "charts/switchboard"
)

// architectures are the linux architectures the image is built for.
var architectures = []string{"amd64", "arm64"}

// options are the command's flags.
type options struct {
	version    string
	out        string
	caBundle   string
	repository string
}

func main() {
	var o options
	flag.StringVar(&o.version, "version", "", "the release's version, SemVer without a leading v: the image's tag, the chart's version and appVersion (required)")
	flag.StringVar(&o.out, "out", "", "folder to write the release into (required)")
	flag.StringVar(&o.caBundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to put at /etc/ssl/certs/ca-certificates.crt in the image")
	flag.StringVar(&o.repository, "repository", "ghcr.io/switchboard-mcp/switchboard", "the image's repository, as the chart's image.repository names it, for the layout's io.containerd.image.name")
	flag.Parse()
	if o.version == "" || o.out == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	files, err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	for _, f := range files {
		fmt.Println(f)
	}
}

// logf reports progress on stderr; stdout carries the files written.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "release: "+format+"\n", args...)
}

// run writes the release into o.out and returns the paths of the files it wrote, the
// checksum file last.
func run(ctx context.Context, o options) ([]string, error) {
	start := time.Now()
	if _, err := semver.StrictNewVersion(o.version); err != nil {
		return nil, fmt.Errorf("version %q: not SemVer 2 without a leading v: %w", o.version, err)
	}
	if err := os.MkdirAll(o.out, 0o750); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "switchboard-release-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	modRoot, err := moduleRoot(ctx)
	if err != nil {
		return nil, err
	}

	image := filepath.Join(o.out, "switchboard-"+o.version+".oci.tar")
	if err := writeImage(ctx, tmp, modRoot, o, image); err != nil {
		return nil, err
	}
	chart, err := packageChart(ctx, modRoot, o)
	if err != nil {
		return nil, err
	}
	files := []string{image, chart}
	sums := filepath.Join(o.out, sumsName)
	if err := writeSums(sums, files); err != nil {
		return nil, err
	}
	logf("done in %s", time.Since(start).Round(100*time.Millisecond))
	return append(files, sums), nil
}

// writeImage builds switchboard for every architecture, assembles the image of each and
// writes their index, tagged o.version, as an OCI layout tarball to file.
func writeImage(ctx context.Context, tmp, modRoot string, o options, file string) error {
	base, err := imagebuild.BaseLayer(o.caBundle)
	if err != nil {
		return err
	}
	index := v1.ImageIndex(empty.Index)
	for _, arch := range architectures {
		bin := filepath.Join(tmp, "switchboard-"+arch)
		logf("building ./cmd/switchboard for linux/%s", arch)
		if err := imagebuild.GoBuild(ctx, modRoot, "./cmd/switchboard", bin, arch, os.Stderr); err != nil {
			return err
		}
		if err := imagebuild.CheckArch(bin, arch); err != nil {
			return err
		}
		platform := v1.Platform{OS: "linux", Architecture: arch}
		img, err := imagebuild.Switchboard(tmp, platform, base, bin,
			map[string]string{"org.opencontainers.image.version": o.version}, imagebuild.OCI)
		if err != nil {
			return fmt.Errorf("linux/%s image: %w", arch, err)
		}
		index = mutate.AppendManifests(index, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &platform},
		})
	}

	dir := filepath.Join(tmp, "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(index, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.version,
		"io.containerd.image.name":          o.repository + ":" + o.version,
	})); err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	if err := tarFolder(dir, file); err != nil {
		return err
	}
	d, err := index.Digest()
	if err != nil {
		return err
	}
	logf("wrote %s (index %s)", file, d)
	return nil
}

// tarFolder writes the files under dir to file as a tar, paths relative to dir, in
// lexical order, with fixed times and owners, through a temporary file.
func tarFolder(dir, file string) (err error) {
	part := file + ".part"
	f, err := os.Create(part) //nolint:gosec // the output folder the -out flag names
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(part, file)
		} else {
			_ = os.Remove(part)
		}
	}()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: imagebuild.Epoch, Mode: 0o644, Typeflag: tar.TypeReg}
		if d.IsDir() {
			hdr.Name += "/"
			hdr.Mode = 0o755
			hdr.Typeflag = tar.TypeDir
			return tw.WriteHeader(hdr)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr.Size = info.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		src, err := os.Open(p) //nolint:gosec // a file of the layout written here
		if err != nil {
			return err
		}
		defer func() { _ = src.Close() }()
		_, err = io.CopyN(tw, src, info.Size())
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// packageChart packages the chart with o.version as its version and appVersion into
// o.out with the Helm go.mod pins, and returns the package's path.
func packageChart(ctx context.Context, modRoot string, o options) (string, error) {
	out, err := filepath.Abs(o.out)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "tool", "helm", "package", chartPath,
		"--version", o.version, "--app-version", o.version, "--destination", out)
	cmd.Dir = modRoot
	// helm built as the binaries are, static and without build paths, so that it reuses
	// their compiled Kubernetes libraries instead of compiling them plain.
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0",
		"GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -trimpath"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm package %s: %w: %s", chartPath, err, strings.TrimSpace(stderr.String()))
	}
	file := filepath.Join(o.out, "switchboard-"+o.version+".tgz")
	if _, err := os.Stat(file); err != nil {
		return "", fmt.Errorf("helm package %s: %w", chartPath, err)
	}
	logf("wrote %s", file)
	return file, nil
}

// writeSums writes the SHA-256 of files to sums as sha256sum does: a line each, the hex
// digest, two spaces and the file's name, sorted by name.
func writeSums(sums string, files []string) error {
	names := make([]string, 0, len(files))
	byName := map[string]string{}
	for _, f := range files {
		name := filepath.Base(f)
		if filepath.Dir(f) != filepath.Dir(sums) {
			return fmt.Errorf("%s: not beside %s", f, sums)
		}
		names = append(names, name)
		byName[name] = f
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		sum, err := sha256File(byName[name])
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, name)
	}
	return os.WriteFile(sums, []byte(b.String()), 0o644) //nolint:gosec // checksums are public
}

// sha256File returns the hex SHA-256 of the file's content.
func sha256File(file string) (string, error) {
	f, err := os.Open(file) //nolint:gosec // a file this command wrote
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// moduleRoot returns the folder of the main module, switchboard's.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run this inside the switchboard module")
	}
	return filepath.Dir(gomod), nil
}

package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// version is the release the test writes.
const version = "1.2.3-rc.1"

// TestRelease writes a release into a temporary folder, as `make release` does into
// dist/, and checks what a user of it relies on: the image index holds a linux/amd64
// and a linux/arm64 image, each the Dockerfile's (user 65532, /switchboard as the
// entrypoint, a static binary of its architecture); the chart lints and carries the
// version as version and appVersion; SHA256SUMS holds the SHA-256 of both files. It
// builds switchboard twice, for amd64 and arm64: from a cold build cache, ten minutes
// or more on a slow two-core machine (make test gives it 30). Nothing is pushed.
func TestRelease(t *testing.T) {
	out := t.TempDir()
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files, err := run(t.Context(), options{version: version, out: out, caBundle: ca, repository: "example.com/switchboard"})
	if err != nil {
		t.Fatal(err)
	}
	image := filepath.Join(out, "switchboard-"+version+".oci.tar")
	chart := filepath.Join(out, "switchboard-"+version+".tgz")
	sums := filepath.Join(out, "SHA256SUMS")
	if !slices.Equal(files, []string{image, chart, sums}) {
		t.Errorf("wrote %q, want %q", files, []string{image, chart, sums})
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Errorf("%d files in the release folder, want the image, the chart and SHA256SUMS: %v", len(entries), entries)
	}

	t.Run("image", func(t *testing.T) { checkImage(t, image) })
	t.Run("chart", func(t *testing.T) { checkChart(t, chart) })
	t.Run("checksums", func(t *testing.T) {
		got := map[string]string{}
		data, err := os.ReadFile(sums)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			sum, name, ok := strings.Cut(sc.Text(), "  ")
			if !ok {
				t.Fatalf("SHA256SUMS line %q is not sha256sum's", sc.Text())
			}
			got[name] = sum
		}
		if len(got) != 2 {
			t.Errorf("SHA256SUMS names %d files, want the image and the chart: %q", len(got), data)
		}
		for _, f := range []string{image, chart} {
			want, err := sha256File(f)
			if err != nil {
				t.Fatal(err)
			}
			if got[filepath.Base(f)] != want {
				t.Errorf("SHA256SUMS says %s of %s, its SHA-256 is %s", got[filepath.Base(f)], filepath.Base(f), want)
			}
		}
	})
}

// checkImage reads the OCI layout tarball file as a registry client would and checks
// the images in it.
func checkImage(t *testing.T, file string) {
	dir := t.TempDir()
	untar(t, file, dir)
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	topManifest, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(topManifest.Manifests) != 1 {
		t.Fatalf("index.json names %d manifests, want one index", len(topManifest.Manifests))
	}
	desc := topManifest.Manifests[0]
	if desc.MediaType != types.OCIImageIndex || desc.Annotations["org.opencontainers.image.ref.name"] != version ||
		desc.Annotations["io.containerd.image.name"] != "example.com/switchboard:"+version {
		t.Errorf("index.json names %s with annotations %v, want an image index tagged %s", desc.MediaType, desc.Annotations, version)
	}
	index, err := top.ImageIndex(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, m := range manifest.Manifests {
		if m.Platform == nil {
			t.Fatalf("manifest %s has no platform in the index", m.Digest)
		}
		platforms = append(platforms, m.Platform.String())
		img, err := index.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(m.Platform.String(), func(t *testing.T) { checkPlatformImage(t, img, *m.Platform) })
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Errorf("the index lists %q, want %q", platforms, want)
	}
}

// checkPlatformImage checks that img, listed for platform, is the Dockerfile's image
// for that platform.
func checkPlatformImage(t *testing.T, img v1.Image, platform v1.Platform) {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != platform.OS || cf.Architecture != platform.Architecture {
		t.Errorf("config says %s/%s", cf.OS, cf.Architecture)
	}
	if cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/switchboard"}) ||
		!slices.Equal(cf.Config.Cmd, []string{"manager"}) {
		t.Errorf("user %q entrypoint %q cmd %q, want 65532:65532, [/switchboard] and [manager]",
			cf.Config.User, cf.Config.Entrypoint, cf.Config.Cmd)
	}
	if cf.Config.Labels["org.opencontainers.image.version"] != version {
		t.Errorf("labels %v, want org.opencontainers.image.version %s", cf.Config.Labels, version)
	}

	var bin []byte
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := "/" + strings.TrimSuffix(hdr.Name, "/")
		if name == "/bin" || strings.HasPrefix(name, "/bin/") || strings.HasSuffix(name, "/sh") {
			t.Errorf("%s in an image that must have no shell", name)
		}
		if name == "/switchboard" {
			if bin, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("/switchboard: %v", err)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[platform.Architecture]
	if f.Machine != want {
		t.Errorf("/switchboard is for %s, want %s", f.Machine, want)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Error("/switchboard asks for a dynamic loader: not a static binary")
		}
	}
}

// checkChart lints the packaged chart with the Helm go.mod pins and reads its version
// and appVersion.
func checkChart(t *testing.T, file string) {
	lint := exec.CommandContext(t.Context(), testenv.BuildGoBinary(t, testenv.HelmCommand), "lint", "--strict", file)
	if out, err := lint.CombinedOutput(); err != nil {
		t.Errorf("helm lint --strict %s: %v\n%s", filepath.Base(file), err, out)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatal("no switchboard/Chart.yaml in the package")
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name != "switchboard/Chart.yaml" {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Version    string `json:"version"`
			AppVersion string `json:"appVersion"`
		}
		if err := yaml.Unmarshal(data, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Version != version || meta.AppVersion != version {
			t.Errorf("Chart.yaml has version %q and appVersion %q, want %s for both", meta.Version, meta.AppVersion, version)
		}
		return
	}
}

// untar extracts the tar file into dir: regular files and folders only.
func untar(t *testing.T, file, dir string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if !strings.HasPrefix(target, dir+string(filepath.Separator)) {
			t.Fatalf("%s: outside the tar's folder", hdr.Name)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(target, data, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: type %c in an OCI layout tarball", hdr.Name, hdr.Typeflag)
		}
	}
}

package imagebuild

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// TestLayerNeedsCleanPaths: a path the tar would carry as something else is refused.
func TestLayerNeedsCleanPaths(t *testing.T) {
	for _, p := range []string{"etc/passwd", "/etc/../passwd", "/", "/etc/"} {
		if err := writeLayer(&bytes.Buffer{}, []File{Content(p, "x")}); err == nil {
			t.Errorf("%q accepted", p)
		}
	}
	if err := writeLayer(&bytes.Buffer{}, []File{Content("/a", "x"), Content("/a", "y")}); err == nil {
		t.Error("a path named twice accepted")
	}
}

// The switchboard image as the Dockerfile builds it, for any platform asked: the binary
// at /switchboard run as 65532 with `manager`, the Dockerfile's labels, no shell, and
// OCI media types (an OCI layout holds it as it is).
func TestSwitchboardImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "switchboard")
	ca := filepath.Join(dir, "ca.crt")
	for file, data := range map[string]string{bin: "\x7fELF switchboard", ca: "-----BEGIN CERTIFICATE-----\n"} {
		if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	base, err := BaseLayer(ca)
	if err != nil {
		t.Fatal(err)
	}
	img, err := Switchboard(dir, v1.Platform{OS: "linux", Architecture: "arm64"}, base, bin,
		map[string]string{"org.opencontainers.image.version": "1.2.3"}, OCI)
	if err != nil {
		t.Fatal(err)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "arm64" {
		t.Errorf("platform %s/%s, want linux/arm64", cf.OS, cf.Architecture)
	}
	if cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/switchboard"}) ||
		!slices.Equal(cf.Config.Cmd, []string{"manager"}) {
		t.Errorf("user %q entrypoint %q cmd %q, want 65532:65532, [/switchboard] and [manager]",
			cf.Config.User, cf.Config.Entrypoint, cf.Config.Cmd)
	}
	if cf.Config.Labels["org.opencontainers.image.version"] != "1.2.3" ||
		cf.Config.Labels["org.opencontainers.image.source"] != "https://github.com/switchboard-mcp/switchboard" {
		t.Errorf("labels %v: want the Dockerfile's and the version", cf.Config.Labels)
	}

	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want %s", mt, types.OCIManifestSchema1)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("config media type %s, want %s", m.Config.MediaType, types.OCIConfigJSON)
	}
	for _, l := range m.Layers {
		if l.MediaType != types.OCILayer {
			t.Errorf("layer media type %s, want %s", l.MediaType, types.OCILayer)
		}
	}

	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	var found bool
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := "/" + strings.TrimSuffix(hdr.Name, "/")
		if p == "/bin" || strings.HasPrefix(p, "/bin/") || strings.HasSuffix(p, "/sh") {
			t.Errorf("%s in an image that must have no shell", p)
		}
		if p == "/switchboard" {
			found = true
			if hdr.Mode != 0o755 || hdr.Uid != 0 {
				t.Errorf("/switchboard: mode %o uid %d, want 755 and root's", hdr.Mode, hdr.Uid)
			}
		}
	}
	if !found {
		t.Error("no /switchboard in the image")
	}
}

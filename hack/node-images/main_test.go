package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/switchboard-mcp/switchboard/internal/imagebuild"
)

// entry is a file of an image's filesystem, as a test sees it.
type entry struct {
	hdr  *tar.Header
	data []byte
}

// filesystem returns img's files, all layers applied, by absolute path.
func filesystem(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	files := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files["/"+strings.TrimSuffix(hdr.Name, "/")] = entry{hdr: hdr, data: data}
	}
}

// writeFile writes data to a new file named name in dir and returns its path.
func writeFile(t *testing.T, dir, name, data string, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), perm); err != nil {
		t.Fatal(err)
	}
	return p
}

// serverImage builds the image a server's binary gets: the base layer and bin at
// /usr/local/bin/server, run as nonroot.
func serverImage(t *testing.T, bin, caBundle string) v1.Image {
	t.Helper()
	base, err := imagebuild.BaseLayer(caBundle)
	if err != nil {
		t.Fatal(err)
	}
	img, err := imagebuild.Build(t.TempDir(), v1.Platform{OS: "linux", Architecture: "amd64"},
		[]imagebuild.Layer{base, imagebuild.BinaryLayer(bin, "/usr/local/bin/server")},
		imagebuild.Config{User: imagebuild.NonRoot, Entrypoint: []string{"/usr/local/bin/server"}, Env: imagebuild.Env}, imagebuild.Docker)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestServerImage(t *testing.T) {
	dir := t.TempDir()
	bin := writeFile(t, dir, "server", "\x7fELF a server", 0o700)
	ca := writeFile(t, dir, "ca.crt", "-----BEGIN CERTIFICATE-----\n", 0o600)
	img := serverImage(t, bin, ca)

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cf.OS, cf.Architecture)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", cf.Config.User)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/server"}) || cf.Config.Cmd != nil {
		t.Errorf("entrypoint %q cmd %q, want [/usr/local/bin/server] and none", cf.Config.Entrypoint, cf.Config.Cmd)
	}

	files := filesystem(t, img)
	for _, want := range []struct {
		path     string
		mode     int64
		uid      int
		contains string
	}{
		{path: "/usr/local/bin/server", mode: 0o755, contains: "\x7fELF a server"},
		{path: "/etc/passwd", mode: 0o644, contains: "\nnonroot:x:65532:65532:nonroot:/home/nonroot:"},
		{path: "/etc/group", mode: 0o644, contains: "\nnonroot:x:65532:\n"},
		{path: "/etc/ssl/certs/ca-certificates.crt", mode: 0o644, contains: "-----BEGIN CERTIFICATE-----"},
		{path: "/tmp", mode: 0o1777},
		{path: "/home/nonroot", mode: 0o700, uid: 65532},
	} {
		got, ok := files[want.path]
		switch {
		case !ok:
			t.Errorf("%s missing", want.path)
		case got.hdr.Mode != want.mode || got.hdr.Uid != want.uid:
			t.Errorf("%s: mode %o uid %d, want %o and %d", want.path, got.hdr.Mode, got.hdr.Uid, want.mode, want.uid)
		case !strings.Contains(string(got.data), want.contains):
			t.Errorf("%s: %q does not contain %q", want.path, got.data, want.contains)
		}
	}
	if !strings.HasPrefix(string(files["/etc/passwd"].data), "root:x:0:0:") {
		t.Errorf("/etc/passwd has no root first: %q", files["/etc/passwd"].data)
	}
	for p := range files {
		if p == "/bin" || strings.HasPrefix(p, "/bin/") || strings.HasSuffix(p, "/sh") {
			t.Errorf("%s in an image that must have no shell", p)
		}
	}

	// The docker archive ctr imports: the tag in it, the image the same.
	ref, err := image{repo: "switchboard.local/server", img: img}.reference()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "server.tar")
	if err := writeTarball(out, ref, img); err != nil {
		t.Fatal(err)
	}
	read, err := tarball.ImageFromPath(out, &ref)
	if err != nil {
		t.Fatalf("reading %s back as %s: %v", out, ref, err)
	}
	want, _ := img.Digest()
	if got, _ := read.Digest(); got != want {
		t.Errorf("archive holds %s, built %s", got, want)
	}
}

func TestSameInputsSameDigest(t *testing.T) {
	dir := t.TempDir()
	bin := writeFile(t, dir, "server", "version 1", 0o755)
	ca := writeFile(t, dir, "ca.crt", "ca", 0o644)
	ref := func() string {
		t.Helper()
		r, err := image{repo: "switchboard.local/server", img: serverImage(t, bin, ca)}.reference()
		if err != nil {
			t.Fatal(err)
		}
		return r.String()
	}
	first := ref()
	// Written again, same bytes, a new modification time.
	writeFile(t, dir, "server", "version 1", 0o755)
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(bin, later, later); err != nil {
		t.Fatal(err)
	}
	if again := ref(); again != first {
		t.Errorf("unchanged binary: %s, then %s", first, again)
	}
	writeFile(t, dir, "server", "version 2", 0o755)
	if changed := ref(); changed == first {
		t.Errorf("changed binary: still %s", changed)
	}
}

func TestServerEverythingFolder(t *testing.T) {
	prefix := t.TempDir()
	pkg := filepath.Join(prefix, "node_modules", "@modelcontextprotocol", "server-everything")
	entryPoint := writeFile(t, pkg, "dist/index.js", "#!/usr/bin/env node\n", 0o755)
	writeFile(t, pkg, "package.json", `{"name":"@modelcontextprotocol/server-everything","bin":{"mcp-server-everything":"dist/index.js"}}`, 0o644)
	if err := os.MkdirAll(filepath.Join(prefix, "node_modules", ".bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../@modelcontextprotocol/server-everything/dist/index.js",
		filepath.Join(prefix, "node_modules", ".bin", "mcp-server-everything")); err != nil {
		t.Fatal(err)
	}

	// What hack/test-servers.sh prints, the entry point, leads to the install folder.
	for _, from := range []string{prefix, entryPoint} {
		got, err := npmPrefix(from)
		if err != nil || got != prefix {
			t.Errorf("npmPrefix(%s) = %q, %v; want %s", from, got, err, prefix)
		}
	}
	if entry, err := binEntry(pkg); err != nil || entry != "dist/index.js" {
		t.Errorf("binEntry = %q, %v; want dist/index.js", entry, err)
	}

	files, err := imagebuild.Tree(filepath.Join(prefix, "node_modules"), appModules)
	if err != nil {
		t.Fatal(err)
	}
	var link imagebuild.File
	for _, f := range files {
		if f.Path == "/app/node_modules/.bin/mcp-server-everything" {
			link = f
		}
	}
	if link.Link != "../@modelcontextprotocol/server-everything/dist/index.js" {
		t.Errorf("the .bin symlink became %+v", link)
	}

	// A symlink out of the tree would dangle in the image.
	if err := os.Symlink("/etc/hostname", filepath.Join(prefix, "node_modules", "outside")); err != nil {
		t.Fatal(err)
	}
	if _, err := imagebuild.Tree(filepath.Join(prefix, "node_modules"), appModules); err == nil {
		t.Error("a symlink to /etc/hostname was copied")
	}
}

func TestSharedLibraries(t *testing.T) {
	// ls is linked dynamically wherever the node's images are built.
	ls := "/bin/ls"
	libs, err := sharedLibraries(t.Context(), ls)
	if err != nil {
		t.Fatal(err)
	}
	var loader, libc bool
	for _, lib := range libs {
		if _, err := os.Stat(lib); err != nil || !filepath.IsAbs(lib) {
			t.Errorf("%s: %v", lib, err)
		}
		loader = loader || strings.Contains(filepath.Base(lib), "ld-linux")
		libc = libc || strings.HasPrefix(filepath.Base(lib), "libc.so")
	}
	if !loader || !libc {
		t.Errorf("%s loads %q: want the dynamic loader and libc among them", ls, libs)
	}
}

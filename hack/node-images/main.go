// Command node-images builds the container images the real node (hack/node.sh) runs,
// without Docker and without a registry: every image is assembled here, on no pulled
// base, with go-containerregistry, and written as a docker-archive tarball that
// `ctr -n k8s.io images import FILE` takes.
//
//	go run ./hack/node-images -out DIR -switchboard BIN -server-everything "$(hack/test-servers.sh)"
//
// It writes DIR/NAME.tar for each image, NAME being the last element of its repository,
// and DIR/images.txt, printed on stdout too: a comment, then one image reference a line
// in this order, a server image's line followed by a tab and the command that starts its
// stdio server (space-separated argv):
//
//  1. switchboard.local/switchboard: the manager and bridge image, as the Dockerfile
//     builds it on distroless static:nonroot (/switchboard, ENTRYPOINT ["/switchboard"],
//     CMD ["manager"], USER 65532:65532, no shell).
//  2. registry.k8s.io/pause:3.10.2: the pod sandbox image containerd v2.4.2 asks for by
//     default, built from Kubernetes' own pause.c.
//  3. switchboard.local/server-everything: npm @modelcontextprotocol/server-everything
//     on the host's node binary and the shared libraries it loads.
//  4. switchboard.local/go-sdk-hello: go-sdk's examples/server/hello (one tool, greet),
//     of the go-sdk release go.mod names, as released.
//  5. switchboard.local/fetchserver: test/node/fetchserver, the egress tests' fixture.
//  6. switchboard.local/go-sdk-hello-root: image 4 run as root, which a namespace that
//     demands non-root pods refuses.
//
// Every image is linux/amd64, has its binaries at fixed absolute paths and no shell;
// the server images' entrypoint is the command their line gives, so that the image
// runs its server alone, and the operator's own command (`switchboard bridge -- ...`)
// replaces it. Images 1 and 3 to 6 carry what distroless static:nonroot carries that
// matters: /etc/passwd and /etc/group with root and nonroot (65532), the host's CA
// bundle, /tmp and /home/nonroot. Their tags are the first 12 hex digits of the image's
// digest, so a changed input gives a new reference; files and config carry a fixed
// time, so unchanged inputs give the same digest.
package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/switchboard-mcp/switchboard/internal/imagebuild"
)

const (
	// pauseRef is containerd v2.4.2's default sandbox image (DefaultSandboxImage in
	// internal/cri/config/config.go); the node's containerd runs every pod's sandbox
	// from it and must find it without a registry.
	pauseRef = "registry.k8s.io/pause:3.10.2"
	// pauseUser is the user the pause image runs as, as Kubernetes builds it.
	pauseUser = "65535:65535"
	// listName is the list file's name in the output folder.
	listName = "images.txt"
	// serverEverything is the npm package of image 3.
	serverEverything = "@modelcontextprotocol/server-everything"
	// goSDK is the module of image 4 and hello its example server.
	goSDK      = "github.com/modelcontextprotocol/go-sdk"
	helloPkg   = "./examples/server/hello"
	nodePath   = "/usr/local/bin/node"
	appModules = "/app/node_modules"
)

// listHeader opens the list file: which line is which.
const listHeader = `# Images for the node, built by hack/node-images; import each with
# ctr -n k8s.io images import DIR/NAME.tar (NAME: the repository's last element).
# One reference a line, in this order: switchboard, switchboard-rebuilt (the same binary
# in an image of another digest, what an upgrade rolls to), pause (containerd's sandbox
# image), server-everything, go-sdk-hello (go-sdk's example server), fetchserver (the
# egress fixture), go-sdk-hello-root (image 4 as root), coredns (when -coredns is given).
# A server's line has a tab and then the command that starts its stdio server,
# space-separated.
`

// options are the command's flags.
type options struct {
	out               string
	switchboard       string
	serverEverything  string
	node              string
	pauseSource       string
	kubernetesVersion string
	caBundle          string
	registry          string
	coredns           string
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "", "folder to write the image tarballs and "+listName+" into (required)")
	flag.StringVar(&o.switchboard, "switchboard", "", "static switchboard binary (default: build ./cmd/switchboard)")
	flag.StringVar(&o.serverEverything, "server-everything", "", "npm install folder of "+serverEverything+", or any path inside it, such as the entry point hack/test-servers.sh prints (required)")
	flag.StringVar(&o.node, "node", "", "node binary for the server-everything image (default: node on PATH)")
	flag.StringVar(&o.pauseSource, "pause-source", "", "Kubernetes' build/pause/linux/pause.c (default: from k8s.io/kubernetes in the module cache)")
	flag.StringVar(&o.kubernetesVersion, "kubernetes-version", "1.37.2", "the Kubernetes release whose pause.c to build, without the v")
	flag.StringVar(&o.caBundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to put at /etc/ssl/certs/ca-certificates.crt")
	flag.StringVar(&o.registry, "registry", "switchboard.local", "registry part of the references of the images built here")
	flag.StringVar(&o.coredns, "coredns", "", "static CoreDNS binary for the node's cluster DNS image (default: no such image)")
	flag.Parse()
	if o.out == "" || o.serverEverything == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "node-images:", err)
		os.Exit(1)
	}
}

// logf reports progress on stderr; stdout carries the list alone.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "node-images: "+format+"\n", args...)
}

// image is one image to write: its repository, its tag when fixed (else derived from
// its digest), and, for a server, the command that starts it.
type image struct {
	repo    string
	tag     string
	img     v1.Image
	command []string
}

func run(ctx context.Context, o options) error {
	start := time.Now()
	if err := os.MkdirAll(o.out, 0o750); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "node-images-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()

	modRoot, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	base, err := imagebuild.BaseLayer(o.caBundle)
	if err != nil {
		return err
	}

	// The binaries: built here unless given.
	if o.switchboard == "" {
		o.switchboard = filepath.Join(tmp, "switchboard")
		logf("building ./cmd/switchboard")
		if err := goBuild(ctx, modRoot, "./cmd/switchboard", o.switchboard); err != nil {
			return err
		}
	}
	if err := checkAMD64(o.switchboard); err != nil {
		return err
	}
	pauseBin := filepath.Join(tmp, "pause")
	if err := buildPause(ctx, tmp, o, pauseBin); err != nil {
		return err
	}
	hello := filepath.Join(tmp, "hello")
	if err := buildHello(ctx, tmp, modRoot, hello); err != nil {
		return err
	}
	fetch := filepath.Join(tmp, "fetchserver")
	logf("building ./test/node/fetchserver")
	if err := goBuild(ctx, modRoot, "./test/node/fetchserver", fetch); err != nil {
		return err
	}

	platform := v1.Platform{OS: "linux", Architecture: "amd64"}
	var images []image
	add := func(repo, tag string, layers []imagebuild.Layer, cfg imagebuild.Config, command []string) error {
		img, err := imagebuild.Build(tmp, platform, layers, cfg, imagebuild.Docker)
		if err != nil {
			return fmt.Errorf("%s: %w", repo, err)
		}
		images = append(images, image{repo: repo, tag: tag, img: img, command: command})
		return nil
	}
	addSwitchboard := func(repo string, labels map[string]string) error {
		img, err := imagebuild.Switchboard(tmp, platform, base, o.switchboard, labels, imagebuild.Docker)
		if err != nil {
			return fmt.Errorf("%s: %w", repo, err)
		}
		images = append(images, image{repo: repo, img: img})
		return nil
	}

	logf("assembling the switchboard image")
	if err := addSwitchboard(o.registry+"/switchboard", nil); err != nil {
		return err
	}
	// What an upgrade rolls to: the same binary in an image of its own digest, as a
	// rebuild from the same commit gives.
	if err := addSwitchboard(o.registry+"/switchboard-rebuilt", map[string]string{
		"org.opencontainers.image.description": "Kubernetes operator for MCP server connections (rebuilt)",
	}); err != nil {
		return err
	}

	pauseRepo, pauseTag, _ := strings.Cut(pauseRef, ":")
	if err := add(pauseRepo, pauseTag, []imagebuild.Layer{imagebuild.BinaryLayer(pauseBin, "/pause")},
		imagebuild.Config{User: pauseUser, Entrypoint: []string{"/pause"}}, nil); err != nil {
		return err
	}

	logf("assembling the server-everything image")
	nodeLayers, command, err := serverEverythingLayers(ctx, o)
	if err != nil {
		return err
	}
	if err := add(o.registry+"/server-everything", "", append([]imagebuild.Layer{base}, nodeLayers...),
		imagebuild.Config{User: imagebuild.NonRoot, Entrypoint: command, Env: imagebuild.Env}, command); err != nil {
		return err
	}

	helloCmd := []string{"/usr/local/bin/hello"}
	helloLayer := imagebuild.BinaryLayer(hello, helloCmd[0])
	if err := add(o.registry+"/go-sdk-hello", "", []imagebuild.Layer{base, helloLayer},
		imagebuild.Config{User: imagebuild.NonRoot, Entrypoint: helloCmd, Env: imagebuild.Env}, helloCmd); err != nil {
		return err
	}
	fetchCmd := []string{"/usr/local/bin/fetchserver"}
	if err := add(o.registry+"/fetchserver", "", []imagebuild.Layer{base, imagebuild.BinaryLayer(fetch, fetchCmd[0])},
		imagebuild.Config{User: imagebuild.NonRoot, Entrypoint: fetchCmd, Env: imagebuild.Env}, fetchCmd); err != nil {
		return err
	}
	if err := add(o.registry+"/go-sdk-hello-root", "", []imagebuild.Layer{base, helloLayer},
		imagebuild.Config{Entrypoint: helloCmd, Env: imagebuild.Env}, helloCmd); err != nil {
		return err
	}
	if o.coredns != "" {
		// Unprivileged: its pod lowers net.ipv4.ip_unprivileged_port_start to bind 53.
		if err := add(o.registry+"/coredns", "", []imagebuild.Layer{base, imagebuild.BinaryLayer(o.coredns, "/coredns")},
			imagebuild.Config{User: imagebuild.NonRoot, Entrypoint: []string{"/coredns"}, Env: imagebuild.Env}, nil); err != nil {
			return err
		}
	}

	var list strings.Builder
	list.WriteString(listHeader)
	for _, im := range images {
		ref, err := im.reference()
		if err != nil {
			return err
		}
		file := filepath.Join(o.out, path.Base(im.repo)+".tar")
		if err := writeTarball(file, ref, im.img); err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
		info, err := os.Stat(file)
		if err != nil {
			return err
		}
		logf("wrote %s (%s, %.1f MB)", file, ref, float64(info.Size())/1e6)
		list.WriteString(ref.String())
		if im.command != nil {
			list.WriteString("\t" + strings.Join(im.command, " "))
		}
		list.WriteString("\n")
	}
	if err := writeAtomically(filepath.Join(o.out, listName), []byte(list.String())); err != nil {
		return err
	}
	fmt.Print(list.String())
	logf("done in %s", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// reference is the image's tag: its fixed one, or the first 12 hex digits of its digest.
func (im image) reference() (name.Tag, error) {
	tag := im.tag
	if tag == "" {
		d, err := im.img.Digest()
		if err != nil {
			return name.Tag{}, err
		}
		tag = d.Hex[:12]
	}
	return name.NewTag(im.repo+":"+tag, name.StrictValidation)
}

// writeTarball writes img as a docker archive tagged ref to file, through a temporary
// file, so that a file that exists is whole.
func writeTarball(file string, ref name.Tag, img v1.Image) error {
	part := file + ".part"
	if err := tarball.WriteToFile(part, ref, img); err != nil {
		_ = os.Remove(part)
		return err
	}
	return os.Rename(part, file)
}

// writeAtomically writes data to file through a temporary file.
func writeAtomically(file string, data []byte) error {
	part := file + ".part"
	if err := os.WriteFile(part, data, 0o600); err != nil {
		return err
	}
	return os.Rename(part, file)
}

// serverEverythingLayers returns the layers of the server-everything image, node with
// its shared libraries and the npm install's node_modules, and the command that starts
// its stdio server.
func serverEverythingLayers(ctx context.Context, o options) ([]imagebuild.Layer, []string, error) {
	node := o.node
	if node == "" {
		var err error
		if node, err = exec.LookPath("node"); err != nil {
			return nil, nil, err
		}
	}
	node, err := filepath.EvalSymlinks(node)
	if err != nil {
		return nil, nil, err
	}
	if err := checkAMD64(node); err != nil {
		return nil, nil, err
	}
	libs, err := sharedLibraries(ctx, node)
	if err != nil {
		return nil, nil, err
	}
	runtime := []imagebuild.File{imagebuild.Copied(nodePath, node, 0o755)}
	for _, lib := range libs {
		source, err := filepath.EvalSymlinks(lib)
		if err != nil {
			return nil, nil, err
		}
		info, err := os.Stat(source)
		if err != nil {
			return nil, nil, err
		}
		runtime = append(runtime, imagebuild.Copied(lib, source, info.Mode().Perm()))
	}

	prefix, err := npmPrefix(o.serverEverything)
	if err != nil {
		return nil, nil, err
	}
	entry, err := binEntry(filepath.Join(prefix, "node_modules", serverEverything))
	if err != nil {
		return nil, nil, err
	}
	modules, err := imagebuild.Tree(filepath.Join(prefix, "node_modules"), appModules)
	if err != nil {
		return nil, nil, err
	}
	command := []string{nodePath, path.Join(appModules, serverEverything, entry), "stdio"}
	return []imagebuild.Layer{
		{Comment: "node and its shared libraries", Files: runtime},
		{Comment: serverEverything, Files: modules},
	}, command, nil
}

// sharedLibraries returns the shared libraries bin loads, as ldd names them, and its
// program interpreter (the dynamic loader), absolute host paths each.
func sharedLibraries(ctx context.Context, bin string) ([]string, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, err
	}
	var libs []string
	seen := map[string]bool{}
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		interp := make([]byte, p.Filesz)
		if _, err := p.ReadAt(interp, 0); err != nil {
			_ = f.Close()
			return nil, err
		}
		loader := string(bytes.TrimRight(interp, "\x00"))
		libs = append(libs, loader)
		seen[loader] = true
	}
	_ = f.Close()

	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", or the loader's
		// "/lib64/ld-linux-x86-64.so.2 (0x...)", or the vDSO, which is no file.
		line := strings.TrimSpace(sc.Text())
		if _, after, ok := strings.Cut(line, "=> "); ok {
			line = after
		}
		lib, _, _ := strings.Cut(line, " ")
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("ldd %s: %s", bin, sc.Text())
		}
		if !filepath.IsAbs(lib) || seen[lib] {
			continue
		}
		libs = append(libs, lib)
		seen[lib] = true
	}
	return libs, sc.Err()
}

// npmPrefix returns the npm install folder of server-everything: p, or the nearest
// folder above p, that holds node_modules/@modelcontextprotocol/server-everything.
func npmPrefix(p string) (string, error) {
	dir, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", serverEverything, "package.json")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%s: no node_modules/%s in it or above it", p, serverEverything)
		}
		dir = parent
	}
}

// binEntry returns the entry point the npm package in dir names in "bin", relative to
// dir: the only one, or the one named like the package.
func binEntry(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "package.json")) //nolint:gosec // the package the -server-everything flag names
	if err != nil {
		return "", err
	}
	var pkg struct {
		Name string          `json:"name"`
		Bin  json.RawMessage `json:"bin"`
	}
	if err := json.Unmarshal(data, &pkg); err != nil {
		return "", fmt.Errorf("%s/package.json: %w", dir, err)
	}
	var bin string
	if err := json.Unmarshal(pkg.Bin, &bin); err != nil {
		var bins map[string]string
		if err := json.Unmarshal(pkg.Bin, &bins); err != nil {
			return "", fmt.Errorf("%s/package.json: bin is neither a string nor an object", dir)
		}
		short := path.Base(pkg.Name)
		for cmd, b := range bins {
			if len(bins) == 1 || cmd == short || cmd == "mcp-"+short {
				bin = b
			}
		}
	}
	bin = path.Clean(bin)
	if bin == "." || path.IsAbs(bin) || strings.HasPrefix(bin, "../") {
		return "", fmt.Errorf("%s/package.json: no entry point in bin", dir)
	}
	return bin, nil
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

// goCommand is a go command run in dir that builds static linux/amd64 binaries and
// leaves any workspace out.
func goCommand(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOWORK=off")
	cmd.Stderr = os.Stderr
	return cmd
}

// goBuild builds the package pkg of the module in dir into out for linux/amd64,
// static and stripped, as the Dockerfile builds switchboard.
func goBuild(ctx context.Context, dir, pkg, out string) error {
	return imagebuild.GoBuild(ctx, dir, pkg, out, "amd64", os.Stderr)
}

// checkAMD64 fails unless bin is an x86-64 ELF executable: the images are linux/amd64.
func checkAMD64(bin string) error {
	return imagebuild.CheckArch(bin, "amd64")
}

// downloadModule returns the folder of module@version in the module cache, downloading
// it if need be. It runs in tmp, outside any module, so that no go.mod's
// replace applies.
func downloadModule(ctx context.Context, tmp, module, version string) (string, error) {
	cmd := goCommand(ctx, tmp, "mod", "download", "-json", module+"@"+version)
	cmd.Env = append(cmd.Env, "GO111MODULE=on")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %w", module, version, err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: no folder in %q", module, version, out)
	}
	return m.Dir, nil
}

// buildHello builds go-sdk's hello example server of the go-sdk release go.mod requires
// into out. go.mod replaces go-sdk with third_party/go-sdk, which has no examples: the
// example is built in the released module, with the dependencies its own go.mod names.
func buildHello(ctx context.Context, tmp, modRoot, out string) error {
	cmd := goCommand(ctx, modRoot, "list", "-m", "-f", "{{.Version}}", goSDK)
	version, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go list -m %s: %w", goSDK, err)
	}
	dir, err := downloadModule(ctx, tmp, goSDK, strings.TrimSpace(string(version)))
	if err != nil {
		return err
	}
	logf("building %s@%s %s", goSDK, strings.TrimSpace(string(version)), helloPkg)
	return goBuild(ctx, dir, helloPkg, out)
}

// buildPause compiles Kubernetes' pause.c, static, with the flags of its Makefile, into
// out.
func buildPause(ctx context.Context, tmp string, o options, out string) error {
	source := o.pauseSource
	if source == "" {
		dir, err := downloadModule(ctx, tmp, "k8s.io/kubernetes", "v"+o.kubernetesVersion)
		if err != nil {
			return err
		}
		source = filepath.Join(dir, "build", "pause", "linux", "pause.c")
	}
	_, tag, _ := strings.Cut(pauseRef, ":")
	logf("compiling %s", source)
	cmd := exec.CommandContext(ctx, "gcc", "-Os", "-Wall", "-Werror", "-static", "-DVERSION=v"+tag, "-o", out, source)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("gcc %s: %w", source, err)
	}
	return nil
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	apiv0 "github.com/modelcontextprotocol/registry/pkg/api/v0"
	"github.com/modelcontextprotocol/registry/pkg/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// Bounds of switchboard import.
const (
	maxServerJSONBytes = 4 << 20
	importTimeout      = 30 * time.Second
)

// Annotations an imported MCPServer carries: where it came from.
const (
	annotationRegistryName    = "mcp.switchboard.dev/registry-name"
	annotationRegistryVersion = "mcp.switchboard.dev/registry-version"
)

// importOptions are the flags of switchboard import.
type importOptions struct {
	file       string
	registry   string
	server     string
	version    string
	namespace  string
	name       string
	secretName string
	command    []string
}

func runImport(args []string) int {
	var o importOptions
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: switchboard import [flags] [FILE]

Reads one MCP Registry server.json (FILE, - for standard input, or one entry of a registry
with --registry and --server) and prints an MCPServer manifest to review and apply:
a remote becomes spec.http with each declared header read from a Secret, an oci package
becomes spec.stdio. Inputs the entry declares become REPLACE_ME placeholders or Secret
references, listed in the manifest's leading comment. Anything that cannot be mapped
is an error.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.registry, "registry", "", "Base URL of an MCP registry (https://registry.modelcontextprotocol.io) to read the entry from, with --server.")
	fs.StringVar(&o.server, "server", "", "Name of the registry entry to import, such as io.github.github/github-mcp-server.")
	fs.StringVar(&o.version, "version", "latest", "Version of the registry entry to import.")
	fs.StringVar(&o.namespace, "namespace", "", "Namespace of the MCPServer; left out when empty.")
	fs.StringVar(&o.name, "name", "", "Name of the MCPServer; by default the part of the entry's name after its slash, made a DNS label.")
	fs.StringVar(&o.secretName, "secret-name", "", "Secret the manifest reads header values (default <name>-headers) or secret environment variables (default <name>-env) from.")
	fs.Func("command", "Command of an oci package's container, comma-separated (server.json does not say what the image runs); a placeholder when empty.", func(v string) error {
		o.command = strings.Split(v, ",")
		return nil
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case fs.NArg() > 1:
		fs.Usage()
		return 2
	case fs.NArg() == 1:
		o.file = fs.Arg(0)
	}
	if (o.file == "") == (o.registry == "") || (o.registry != "") != (o.server != "") {
		fmt.Fprintln(os.Stderr, "switchboard import: give a FILE, or --registry and --server")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), importTimeout)
	defer cancel()
	srv, err := readServerJSON(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "switchboard import: %v\n", err)
		return 1
	}
	out, err := importManifest(srv, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "switchboard import: %s: %v\n", srv.Name, err)
		return 1
	}
	_, _ = os.Stdout.Write(out)
	return 0
}

// readServerJSON reads the entry from a file, standard input or a registry.
func readServerJSON(ctx context.Context, o importOptions) (*apiv0.ServerJSON, error) {
	var raw []byte
	var err error
	switch {
	case o.file == "-":
		raw, err = readBounded(os.Stdin)
	case o.file != "":
		var f *os.File
		if f, err = os.Open(o.file); err != nil {
			return nil, err
		}
		defer f.Close()
		raw, err = readBounded(f)
	default:
		raw, err = fetchServerJSON(ctx, o.registry, o.server, o.version)
	}
	if err != nil {
		return nil, err
	}
	return decodeServerJSON(raw)
}

func readBounded(r io.Reader) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(r, maxServerJSONBytes+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxServerJSONBytes {
		return nil, fmt.Errorf("server.json is larger than %d bytes", maxServerJSONBytes)
	}
	return raw, nil
}

// decodeServerJSON decodes a server.json, or a registry's answer that wraps one in
// "server".
func decodeServerJSON(raw []byte) (*apiv0.ServerJSON, error) {
	var wrapped struct {
		Server *apiv0.ServerJSON `json:"server"`
	}
	if err := json.Unmarshal(raw, &wrapped); err == nil && wrapped.Server != nil {
		return wrapped.Server, nil
	}
	var srv apiv0.ServerJSON
	if err := json.Unmarshal(raw, &srv); err != nil {
		return nil, fmt.Errorf("decoding server.json: %w", err)
	}
	if srv.Name == "" {
		return nil, errors.New("server.json has no name")
	}
	return &srv, nil
}

// fetchServerJSON GETs one version of one entry from a registry's
// /v0.1/servers/{name}/versions/{version}.
func fetchServerJSON(ctx context.Context, registry, server, version string) ([]byte, error) {
	base, err := url.Parse(strings.TrimSuffix(registry, "/"))
	if err != nil || (base.Scheme != "https" && base.Scheme != "http") || base.Host == "" {
		return nil, fmt.Errorf("--registry must be an http or https URL")
	}
	u := base.String() + "/v0.1/servers/" + url.PathEscape(server) + "/versions/" + url.PathEscape(version)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	client := &http.Client{Timeout: importTimeout}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading %s %s from %s: %w", server, version, base.Host, err)
	}
	defer resp.Body.Close()
	raw, err := readBounded(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("registry %s answered %s for %s version %s", base.Host, resp.Status, server, version)
	}
	return raw, nil
}

// importer builds one manifest, collecting the notes its leading comment lists.
type importer struct {
	srv    *apiv0.ServerJSON
	o      importOptions
	secret string
	notes  []string
	// envFromSecret are the keys of o.secretName the container's environment reads.
	secretKeys []string
}

func (im *importer) note(format string, args ...any) {
	im.notes = append(im.notes, fmt.Sprintf(format, args...))
}

// importManifest returns the MCPServer manifest of srv as YAML with a leading comment.
func importManifest(srv *apiv0.ServerJSON, o importOptions) ([]byte, error) {
	im := &importer{srv: srv, o: o}
	if o.name == "" {
		o.name = nameOf(srv.Name)
	}
	if errs := validation.IsDNS1123Label(o.name); len(errs) > 0 {
		return nil, fmt.Errorf("--name %q: %s", o.name, strings.Join(errs, "; "))
	}
	if o.namespace != "" {
		if errs := validation.IsDNS1123Label(o.namespace); len(errs) > 0 {
			return nil, fmt.Errorf("--namespace %q: %s", o.namespace, strings.Join(errs, "; "))
		}
	}
	im.o = o
	obj := &mcpv1alpha1.MCPServer{
		TypeMeta: metav1.TypeMeta{APIVersion: mcpv1alpha1.GroupVersion.String(), Kind: "MCPServer"},
		ObjectMeta: metav1.ObjectMeta{
			Name: o.name, Namespace: o.namespace,
			Annotations: map[string]string{annotationRegistryName: srv.Name, annotationRegistryVersion: srv.Version},
		},
		Spec: mcpv1alpha1.MCPServerSpec{Description: cutString(srv.Description, 1024)},
	}
	var err error
	switch remote := pickRemote(srv.Remotes); {
	case remote != nil:
		im.secret = firstNonEmpty(o.secretName, o.name+"-headers")
		obj.Spec.HTTP, err = im.http(remote)
	default:
		im.secret = firstNonEmpty(o.secretName, o.name+"-env")
		obj.Spec.Stdio, err = im.stdio()
	}
	if err != nil {
		return nil, err
	}
	return im.render(obj)
}

// pickRemote returns the entry's streamable-http remote, else its sse remote, else nil.
func pickRemote(remotes []model.Transport) *model.Transport {
	for _, want := range []string{model.TransportTypeStreamableHTTP, model.TransportTypeSSE} {
		for i := range remotes {
			if remotes[i].Type == want {
				return &remotes[i]
			}
		}
	}
	return nil
}

// reservedHeaders are the headers an MCPServer may not set (DESIGN: rejected at admission).
var reservedHeaders = []string{"host", "content-type", "content-length", "accept", "transfer-encoding",
	"connection", "mcp-session-id", "mcp-protocol-version", "last-event-id"}

func (im *importer) http(remote *model.Transport) (*mcpv1alpha1.HTTPServerSpec, error) {
	for _, r := range im.srv.Remotes {
		if r.Type != model.TransportTypeStreamableHTTP && r.Type != model.TransportTypeSSE {
			return nil, fmt.Errorf("remote of transport %q cannot be imported: want streamable-http or sse", r.Type)
		}
	}
	u, err := im.substituteURL(remote.URL, remote.Variables)
	if err != nil {
		return nil, err
	}
	spec := &mcpv1alpha1.HTTPServerSpec{URL: u, Protocol: mcpv1alpha1.HTTPProtocolStreamableHTTP}
	if remote.Type == model.TransportTypeSSE {
		spec.Protocol = mcpv1alpha1.HTTPProtocolSSE
	}
	if strings.HasPrefix(u, "http://") {
		spec.AllowInsecureHTTP = true
		im.note("the remote is plain http: allowInsecureHTTP is set, and headers travel unencrypted")
	}
	for _, h := range remote.Headers {
		lower := strings.ToLower(h.Name)
		if slices.Contains(reservedHeaders, lower) || strings.HasPrefix(lower, "mcp-") {
			return nil, fmt.Errorf("header %q is reserved: Switchboard sets it itself", h.Name)
		}
		if !secretKeyPattern.MatchString(h.Name) {
			return nil, fmt.Errorf("header %q cannot be a Secret key", h.Name)
		}
		spec.Headers = append(spec.Headers, mcpv1alpha1.HTTPHeader{
			Name:      h.Name,
			ValueFrom: &mcpv1alpha1.HeaderValueSource{SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: im.secret, Key: h.Name}},
		})
		im.secretKeys = append(im.secretKeys, h.Name)
		im.note("Secret %s, key %s: the %s header%s%s", im.secret, h.Name, h.Name, required(h.IsRequired), describe(h.Description, h.Value))
	}
	return spec, nil
}

var secretKeyPattern = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

// substituteURL replaces the {variables} of a remote's URL with their value or default,
// or a replace-me placeholder that keeps the URL a valid one.
func (im *importer) substituteURL(raw string, vars map[string]model.Input) (string, error) {
	var missing []string
	out := variablePattern.ReplaceAllStringFunc(raw, func(m string) string {
		v := m[1 : len(m)-1]
		in, ok := vars[v]
		switch {
		case ok && in.Value != "":
			return in.Value
		case ok && in.Default != "":
			im.note("URL variable %s: the default %q is used%s", v, in.Default, describe(in.Description, ""))
			return in.Default
		case ok:
			ph := "replace-me-" + strings.ToLower(strings.ReplaceAll(v, "_", "-"))
			im.note("%s in spec.http.url: the URL variable %s%s%s", ph, v, required(in.IsRequired), describe(in.Description, ""))
			return ph
		default:
			missing = append(missing, v)
			return m
		}
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("the remote's URL uses variables %q that the entry does not declare", missing)
	}
	u, err := url.Parse(out)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("the remote's URL is not an http or https URL")
	}
	return out, nil
}

var variablePattern = regexp.MustCompile(`\{[a-zA-Z_][a-zA-Z0-9_]*\}`)

func (im *importer) stdio() (*mcpv1alpha1.StdioServerSpec, error) {
	var pkg *model.Package
	var unusable []string
	for i := range im.srv.Packages {
		p := &im.srv.Packages[i]
		if p.RegistryType == model.RegistryTypeOCI && p.Transport.Type == model.TransportTypeStdio && pkg == nil {
			pkg = p
			continue
		}
		unusable = append(unusable, describePackage(p))
	}
	if pkg == nil {
		if len(unusable) == 0 {
			return nil, errors.New("the entry has neither a remote nor a package: nothing to run")
		}
		return nil, fmt.Errorf("nothing Switchboard can run: it connects to streamable-http or sse remotes and runs stdio servers from container images (oci packages), and this entry offers only %s; build an image that runs it and import an oci package, or write the MCPServer by hand",
			strings.Join(unusable, ", "))
	}
	if len(unusable) > 0 {
		im.note("other packages of the entry are not used: %s", strings.Join(unusable, ", "))
	}
	image, err := imageOf(pkg)
	if err != nil {
		return nil, err
	}
	spec := &mcpv1alpha1.StdioServerSpec{Image: image, Command: im.o.command}
	if len(spec.Command) == 0 {
		spec.Command = []string{"REPLACE_ME_COMMAND"}
		im.note("REPLACE_ME_COMMAND in spec.stdio.command: the image's entrypoint (server.json does not name it; see `crane config %s`), or pass --command", image)
	}
	// Environment variables: declared ones, then those docker's -e runtime arguments set.
	env := map[string]bool{}
	for _, ev := range pkg.EnvironmentVariables {
		e, err := im.envVar(ev.Name, ev.InputWithVariables)
		if err != nil {
			return nil, err
		}
		if e != nil {
			spec.Env = append(spec.Env, *e)
			env[ev.Name] = true
		}
	}
	for _, a := range pkg.RuntimeArguments {
		if a.Type != model.ArgumentTypeNamed || (a.Name != "-e" && a.Name != "--env") {
			return nil, fmt.Errorf("runtime argument %q (for %s) cannot be mapped: only -e/--env NAME=VALUE have a Kubernetes equivalent", firstNonEmpty(a.Name, a.ValueHint, a.Value), firstNonEmpty(pkg.RunTimeHint, "the runtime"))
		}
		k, v, ok := strings.Cut(a.Value, "=")
		if !ok || k == "" {
			if env[a.Value] {
				continue // -e NAME passes a declared variable through
			}
			return nil, fmt.Errorf("runtime argument %s %q cannot be mapped: want NAME=VALUE or a declared environment variable", a.Name, a.Value)
		}
		if env[k] {
			continue
		}
		in := a.InputWithVariables
		in.Value = v
		e, err := im.envVar(k, in)
		if err != nil {
			return nil, err
		}
		if e != nil {
			spec.Env = append(spec.Env, *e)
			env[k] = true
		}
	}
	for _, a := range pkg.PackageArguments {
		args, err := im.argument(a)
		if err != nil {
			return nil, err
		}
		spec.Args = append(spec.Args, args...)
	}
	return spec, nil
}

// describePackage names a package in an error or a note.
func describePackage(p *model.Package) string {
	s := p.RegistryType + " package " + p.Identifier
	if p.Version != "" {
		s += " " + p.Version
	}
	if p.Transport.Type != model.TransportTypeStdio {
		s += " (" + p.Transport.Type + ")"
	}
	return s
}

// imageOf returns the image reference of an oci package: its identifier (a full
// reference since server.json 2025-12-11), or the older registryBaseUrl, identifier and
// version.
func imageOf(p *model.Package) (string, error) {
	ref := p.Identifier
	if first, _, ok := strings.Cut(ref, "/"); ok && p.RegistryBaseURL != "" && !strings.ContainsAny(first, ".:") && first != "localhost" {
		if u, err := url.Parse(p.RegistryBaseURL); err == nil && u.Host != "" {
			ref = u.Host + "/" + ref
		}
	}
	if !strings.ContainsAny(ref[strings.LastIndex(ref, "/")+1:], ":@") && p.Version != "" {
		ref += ":" + p.Version
	}
	parsed, err := name.ParseReference(ref, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("oci package %q is not an image reference with a tag or digest: %w", p.Identifier, err)
	}
	return parsed.String(), nil
}

// envVar maps a declared input to an environment variable: a secret one to a key of the
// Secret, a fixed or default value as it is, others to a placeholder. An optional input
// with nothing to set is noted and left out.
func (im *importer) envVar(key string, in model.InputWithVariables) (*corev1.EnvVar, error) {
	if errs := validation.IsEnvVarName(key); len(errs) > 0 {
		return nil, fmt.Errorf("environment variable %q: %s", key, strings.Join(errs, "; "))
	}
	if in.IsSecret || anySecret(in.Variables) {
		if !secretKeyPattern.MatchString(key) {
			return nil, fmt.Errorf("environment variable %q cannot be a Secret key", key)
		}
		im.secretKeys = append(im.secretKeys, key)
		im.note("Secret %s, key %s: the environment variable %s%s%s", im.secret, key, key, required(in.IsRequired), describe(in.Description, in.Value))
		return &corev1.EnvVar{Name: key, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: im.secret}, Key: key,
		}}}, nil
	}
	v, ok := im.value(key, in)
	if !ok {
		return nil, nil
	}
	return &corev1.EnvVar{Name: key, Value: v}, nil
}

// value returns an input's value with its {variables} replaced, its default, or a
// REPLACE_ME placeholder for a required input; false for an optional input with neither
// (noted).
func (im *importer) value(label string, in model.InputWithVariables) (string, bool) {
	switch {
	case in.Value != "":
		return variablePattern.ReplaceAllStringFunc(in.Value, func(m string) string {
			v := m[1 : len(m)-1]
			vin, ok := in.Variables[v]
			switch {
			case ok && vin.Value != "":
				return vin.Value
			case ok && vin.Default != "":
				return vin.Default
			}
			ph := placeholder(v)
			im.note("%s in %s: the variable %s%s%s", ph, label, v, required(vin.IsRequired), describe(vin.Description, ""))
			return ph
		}), true
	case in.Default != "":
		return in.Default, true
	case in.IsRequired:
		ph := placeholder(label)
		im.note("%s: %s%s", ph, label, describe(in.Description, ""))
		return ph, true
	default:
		im.note("left out, optional: %s%s", label, describe(in.Description, ""))
		return "", false
	}
}

// argument maps a package argument to command-line arguments. A secret is not put on a
// command line: it is read from the Secret into an environment variable the argument
// names as $(VAR), which Kubernetes expands.
func (im *importer) argument(a model.Argument) ([]string, error) {
	label := firstNonEmpty(a.Name, a.ValueHint, "positional argument")
	in := a.InputWithVariables
	if in.IsSecret || anySecret(in.Variables) {
		return nil, fmt.Errorf("argument %s takes a secret, which Switchboard does not put on a command line; set it through an environment variable", label)
	}
	v, ok := im.value(label, in)
	switch {
	case a.Type == model.ArgumentTypeNamed && !ok:
		return nil, nil
	case a.Type == model.ArgumentTypeNamed && (in.Value != "" || in.Default != "" || in.IsRequired):
		return []string{a.Name + "=" + v}, nil
	case a.Type == model.ArgumentTypeNamed:
		return []string{a.Name}, nil
	case !ok:
		return nil, nil
	default:
		return []string{v}, nil
	}
}

func anySecret(vars map[string]model.Input) bool {
	for _, v := range vars {
		if v.IsSecret {
			return true
		}
	}
	return false
}

func placeholder(v string) string {
	return "REPLACE_ME_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(strings.TrimLeft(v, "-")))
}

func required(r bool) string {
	if r {
		return " (required)"
	}
	return " (optional)"
}

func describe(description, value string) string {
	s := ""
	if d := strings.Join(strings.Fields(description), " "); d != "" {
		s = ": " + d
	}
	if value != "" {
		s += fmt.Sprintf(" (the entry gives the form %q)", value)
	}
	return s
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

func cutString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// nameOf makes the part of a registry name after its slash a DNS label.
func nameOf(registryName string) string {
	_, after, _ := strings.Cut(registryName, "/")
	var b strings.Builder
	for _, r := range strings.ToLower(after) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	for strings.Contains(s, "--") {
		s = strings.ReplaceAll(s, "--", "-")
	}
	if len(s) > 63 {
		s = strings.TrimRight(s[:63], "-")
	}
	return s
}

// render returns the manifest as YAML, after a comment that names its source and every
// placeholder and Secret key to fill in.
func (im *importer) render(obj *mcpv1alpha1.MCPServer) ([]byte, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	body, err := yaml.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "# Imported from the MCP registry entry %s, version %s, by switchboard import.\n", im.srv.Name, im.srv.Version)
	if len(im.secretKeys) > 0 {
		fmt.Fprintf(&out, "# Create the Secret %s with the keys %s before applying.\n", im.secret, strings.Join(im.secretKeys, ", "))
	}
	if len(im.notes) > 0 {
		out.WriteString("# Review before applying:\n")
		for _, n := range im.notes {
			fmt.Fprintf(&out, "#   - %s\n", strings.ReplaceAll(n, "\n", " "))
		}
	}
	out.Write(body)
	return out.Bytes(), nil
}

package catalog

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
)

// ResourceMetadataPathPrefix starts the path of every protected resource metadata
// document (RFC 9728 §3.1): the prefix, then the path of the endpoint it describes.
const ResourceMetadataPathPrefix = "/.well-known/oauth-protected-resource"

// DefaultResourceScopes are the scopes protected resource metadata lists by default:
// the OpenID Connect scopes under which identity providers put the claims that claim
// mappings usually read (sub, email, preferred_username) into a token. Switchboard
// itself decides on RBAC, never on scopes.
var DefaultResourceScopes = []string{"openid", "email", "profile"}

// plainChallenge is the challenge of a 401 when no metadata is published.
const plainChallenge = `Bearer realm="switchboard"`

// ResourceMetadata publishes the protected resource metadata (RFC 9728) of the
// catalogue's /mcp and of every gateway endpoint, and writes the challenge of their 401
// answers. Its public URL comes from configuration (--gateway-public-url), never from a
// request: a Host header is the caller's to choose, and metadata built from it would send
// a client to log in for whatever resource the caller named. Without a public URL no
// metadata is published (404) and a 401 carries a plain Bearer challenge. The zero value
// and nil publish nothing. It is safe for concurrent use.
type ResourceMetadata struct {
	base      string // public base URL without a trailing slash; "" publishes nothing
	scopes    []string
	providers *identity.Providers // nil: no authorization servers
}

// NewResourceMetadata returns the metadata of the endpoints served under publicURL (the
// base URL clients reach the catalogue's address at: https, or http on loopback for
// tests), listing the advertised issuers of providers as authorization servers and
// scopes as scopes_supported. An empty publicURL publishes nothing.
func NewResourceMetadata(publicURL string, scopes []string, providers *identity.Providers) (*ResourceMetadata, error) {
	if publicURL == "" {
		return &ResourceMetadata{providers: providers}, nil
	}
	u, err := url.Parse(publicURL)
	switch {
	case err != nil:
		return nil, fmt.Errorf("the gateway's public URL is not a URL: %w", err)
	case u.Scheme != "https" && u.Scheme != "http", u.Host == "":
		return nil, fmt.Errorf("the gateway's public URL %q must be an absolute https URL", publicURL)
	case u.Scheme == "http" && !isLoopback(u.Hostname()):
		return nil, fmt.Errorf("the gateway's public URL %q must use https (http only on a loopback address)", publicURL)
	case u.User != nil, u.RawQuery != "", u.Fragment != "", u.Opaque != "":
		return nil, fmt.Errorf("the gateway's public URL must have no userinfo, query or fragment")
	}
	return &ResourceMetadata{
		base:      strings.TrimSuffix(u.String(), "/"),
		scopes:    slices.Clone(scopes),
		providers: providers,
	}, nil
}

// publicURL returns the configured public base URL without a trailing slash; "" when
// none is configured.
func (m *ResourceMetadata) publicURL() string {
	if m == nil {
		return ""
	}
	return m.base
}

// Published reports whether metadata is served: a public URL was configured.
func (m *ResourceMetadata) Published() bool { return m != nil && m.base != "" }

// Challenge returns the WWW-Authenticate value of a 401 answered on endpointPath:
// `Bearer resource_metadata="<public URL>/.well-known/oauth-protected-resource<path>"`
// for an endpoint with metadata, else a plain Bearer challenge.
func (m *ResourceMetadata) Challenge(endpointPath string) string {
	if !m.Published() || !isProtectedEndpoint(endpointPath) {
		return plainChallenge
	}
	return fmt.Sprintf(`Bearer resource_metadata=%q`, m.base+ResourceMetadataPathPrefix+endpointPath)
}

// ServeHTTP answers GET (and CORS preflight) for the metadata of the endpoint whose path
// follows ResourceMetadataPathPrefix; 404 for any other path or when nothing is
// published. Metadata is the same whether the server or toolset exists or not, so it
// tells an unauthenticated caller nothing about what the cluster runs.
func (m *ResourceMetadata) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	endpoint, ok := strings.CutPrefix(r.URL.Path, ResourceMetadataPathPrefix)
	if !m.Published() || !ok || !isProtectedEndpoint(endpoint) {
		writeError(w, errorf(http.StatusNotFound, "no protected resource metadata here"))
		return
	}
	md := &oauthex.ProtectedResourceMetadata{
		Resource:               m.base + endpoint,
		ScopesSupported:        m.scopes,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "Switchboard " + endpoint,
	}
	// With no provider advertised, authorization_servers is left out (go-sdk's type omits
	// it when empty): only Kubernetes tokens open the endpoint then.
	if m.providers != nil {
		md.AuthorizationServers = m.providers.Advertised()
	}
	w.Header().Set("Cache-Control", "no-store")
	auth.ProtectedResourceMetadataHandler(md).ServeHTTP(w, r)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// isProtectedEndpoint reports whether path is the catalogue's /mcp, its registry API
// (/v0.1, whose routes all share one resource) or a well-formed
// gateway endpoint path: a namespace (DNS label) and an MCPServer or MCPToolset name (DNS
// subdomain). Only such paths get metadata, so no caller-chosen text reaches a
// document or a header.
func isProtectedEndpoint(path string) bool {
	if path == "/mcp" || path == RegistryPathPrefix {
		return true
	}
	rest, ok := strings.CutPrefix(path, gatewaypath.Prefix)
	if !ok {
		return false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || (parts[1] != "servers" && parts[1] != "toolsets") {
		return false
	}
	return len(validation.IsDNS1123Label(parts[0])) == 0 && len(validation.IsDNS1123Subdomain(parts[2])) == 0
}

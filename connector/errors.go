package connector

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// Failure reasons. They are the condition reasons of api/v1alpha1, so the controller can
// put them in status as they are.
const (
	ReasonDNSFailure        = mcpv1alpha1.ReasonDNSFailure
	ReasonConnectionRefused = mcpv1alpha1.ReasonConnectionRefused
	ReasonTLSError          = mcpv1alpha1.ReasonTLSError
	ReasonUnauthorized      = mcpv1alpha1.ReasonUnauthorized
	ReasonNotFound          = mcpv1alpha1.ReasonNotFound
	ReasonProtocolError     = mcpv1alpha1.ReasonProtocolError
	ReasonTimeout           = mcpv1alpha1.ReasonTimeout
	ReasonEgressDenied      = mcpv1alpha1.ReasonEgressDenied
	ReasonRedirectDenied    = mcpv1alpha1.ReasonRedirectDenied
	ReasonLimitExceeded     = mcpv1alpha1.ReasonLimitExceeded
	ReasonSessionEnded      = mcpv1alpha1.ReasonSessionEnded
	// ReasonInvalidSpec means the Config cannot be acted on (for example a CA bundle
	// without a certificate); retrying will not help until the config changes.
	ReasonInvalidSpec = mcpv1alpha1.ReasonInvalidSpec
	// ReasonTokenRequestFailed means no OAuth token could be obtained: discovery or
	// the token request failed, or the server rejected a fresh token.
	ReasonTokenRequestFailed = mcpv1alpha1.ReasonTokenRequestFailed
	// ReasonInvalidClient means the token endpoint rejected the client credentials,
	// or the configured private key cannot sign an assertion.
	ReasonInvalidClient = mcpv1alpha1.ReasonInvalidClient
	// ReasonMetadataMismatch means protected resource or authorization server
	// metadata names another resource or issuer than the one asked about, or not the
	// pinned issuer (OAuth2ClientCredentials.Issuer).
	ReasonMetadataMismatch = mcpv1alpha1.ReasonMetadataMismatch
	// ReasonInsufficientScope means the server answered insufficient_scope, or the
	// token endpoint invalid_scope.
	ReasonInsufficientScope = mcpv1alpha1.ReasonInsufficientScope
	// ReasonInvalidGrant means the token endpoint refused the grant (invalid_grant):
	// the workload JWT of a JWT-bearer grant is expired, names another audience, or
	// its issuer is not trusted.
	ReasonInvalidGrant = mcpv1alpha1.ReasonInvalidGrant
	// ReasonWorkloadTokenUnavailable means the AssertionSource of a JWT-bearer grant
	// had no JWT to give.
	ReasonWorkloadTokenUnavailable = mcpv1alpha1.ReasonWorkloadTokenUnavailable
	// ReasonCallerNotAllowed means a caller of a per-caller server was not vouched for
	// by the identity provider the server's config names: its token was sent nowhere.
	ReasonCallerNotAllowed = mcpv1alpha1.ReasonCallerNotAllowed
	// ReasonAuthorizationServerNotAllowed means the authorization server a per-caller
	// server's metadata names is not one its identity provider lists.
	ReasonAuthorizationServerNotAllowed = mcpv1alpha1.ReasonAuthorizationServerNotAllowed
	// ReasonAudienceNotAllowed means a token exchange asks for an audience its
	// identity provider does not allow: nothing was requested.
	ReasonAudienceNotAllowed = mcpv1alpha1.ReasonAudienceNotAllowed
	// ReasonScopeNotAllowed means a per-caller flow asks for a scope its identity
	// provider does not allow: nothing was requested.
	ReasonScopeNotAllowed = mcpv1alpha1.ReasonScopeNotAllowed
)

// maxMessageLen bounds an error message, which may quote server-provided text.
const maxMessageLen = 512

// Error is a classified connector failure. Its Message is fit for a status condition:
// it names URLs as scheme://host:port/path and never carries header values or query
// strings.
type Error struct {
	// Reason is one of the Reason constants.
	Reason string
	// Message says what happened, in words fit for a condition message.
	Message string
	// Transient is true when the failure may heal without anyone changing anything: a
	// server restarting, a name not yet in DNS, a session the server ended. False means a
	// person has to act (a credential, a policy, a server fix). The connector retries
	// either way; the controller reports a transient failure as Reconciling and any
	// other as Stalled. It is decided where the error is made: by its reason (see
	// transientReason), or by the code that knows better.
	Transient bool
	// Authentication is set when the failure happened while obtaining or presenting an
	// OAuth token: it is the reason of the server's Authenticated condition
	// (ReasonTokenRequestFailed, ReasonInvalidClient, ReasonInvalidGrant,
	// ReasonMetadataMismatch, ReasonInsufficientScope, ReasonWorkloadTokenUnavailable,
	// ReasonCallerNotAllowed, ReasonAuthorizationServerNotAllowed,
	// ReasonAudienceNotAllowed or ReasonScopeNotAllowed), while Reason says
	// what happened (EgressDenied
	// for a token endpoint the policy denies, say). Empty for every other failure.
	Authentication string

	// sessionMissing marks a server that dropped the session (404 with a session id):
	// reconnect at once rather than backing off.
	sessionMissing bool
	// connectionRefused marks a connection the server's address refused (nothing
	// listening yet, or a Service whose new endpoint is not yet programmed on this node).
	connectionRefused bool
	// legacyHint marks a Streamable HTTP failure that looks like a server speaking only
	// the legacy HTTP+SSE transport, which Auto then tries.
	legacyHint bool
	// refused marks a token endpoint's OAuth error answer that sending the same grant
	// again would only repeat (invalid_grant, invalid_scope, unauthorized_client, ...).
	refused bool
}

func withLegacyHint(e *Error) *Error {
	out := *e
	out.legacyHint = true
	return &out
}

// Error returns the message prefixed with the reason.
func (e *Error) Error() string { return e.Reason + ": " + e.Message }

// newError returns an Error whose retryability is the default of its reason. Where a
// particular failure heals by itself although its reason usually does not (or the other
// way round), the caller sets Transient on the result.
func newError(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...), Transient: transientReason(reason)}
}

// transientReason reports whether failures of a reason heal by themselves unless the
// code that makes one says otherwise. Refused connections, timeouts, names that do not
// resolve yet and 404s are what a server that is starting or restarting (a new
// Deployment, a Service without endpoints) looks like; an ended session is reconnected.
// A TLS failure, a rejected credential, a denied destination, a broken limit, a
// protocol violation or an unusable config stay until someone changes something.
func transientReason(reason string) bool {
	switch reason {
	case ReasonDNSFailure, ReasonConnectionRefused, ReasonTimeout, ReasonNotFound, ReasonSessionEnded:
		return true
	default:
		return false
	}
}

// classify turns any error from a connect, call or probe into an *Error. incident is a
// failure the HTTP layer recorded while the operation ran (a status code, a broken
// limit) that go-sdk may have flattened into a string; it wins over guessing from the
// error chain, except that typed errors in the chain win over it.
func classify(err error, incident *Error) *Error {
	if err == nil {
		return nil
	}
	var ce *Error
	if errors.As(err, &ce) {
		return ce
	}
	if errors.Is(err, mcp.ErrSessionMissing) {
		// The server forgot the session (a restart, an idle timeout): reconnecting heals it.
		return &Error{Reason: ReasonSessionEnded, Message: "server dropped the session", Transient: true, sessionMissing: true}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return newError(ReasonTimeout, "server did not answer in time")
	}
	if incident != nil {
		return incident
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		if dnsErr.IsNotFound {
			return newError(ReasonDNSFailure, "host %s not found", dnsErr.Name)
		}
		return newError(ReasonDNSFailure, "resolving host %s failed", dnsErr.Name)
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		e := newError(ReasonConnectionRefused, "connection refused")
		e.connectionRefused = true
		return e
	}
	if errors.Is(err, syscall.ECONNRESET) {
		return newError(ReasonConnectionRefused, "connection reset by server")
	}
	if tlsMsg := tlsFailure(err); tlsMsg != "" {
		return newError(ReasonTLSError, "%s", tlsMsg)
	}
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		return newError(ReasonTimeout, "server did not answer in time")
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		return newError(ReasonProtocolError, "server answered with JSON-RPC error %d: %s", rpcErr.Code, rpcErr.Message)
	}
	return newError(ReasonProtocolError, "%s", innermost(err))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// tlsFailure describes a TLS handshake or certificate failure, or returns "".
func tlsFailure(err error) string {
	var (
		unknownAuth x509.UnknownAuthorityError
		hostErr     x509.HostnameError
		certInvalid x509.CertificateInvalidError
		verifyErr   *tls.CertificateVerificationError
		recordErr   tls.RecordHeaderError
		alertErr    tls.AlertError
	)
	switch {
	case errors.As(err, &unknownAuth):
		return "server certificate is signed by an unknown authority"
	case errors.As(err, &hostErr):
		return "server certificate is not valid for host " + hostErr.Host
	case errors.As(err, &certInvalid):
		return "server certificate is invalid: " + certInvalid.Error()
	case errors.As(err, &verifyErr):
		return "server certificate verification failed"
	case errors.As(err, &recordErr):
		return "server does not speak TLS"
	case errors.As(err, &alertErr):
		return "TLS handshake failed: " + alertErr.Error()
	}
	if strings.Contains(err.Error(), "tls: ") {
		return "TLS handshake failed"
	}
	return ""
}

// innermost returns the message of the deepest error that still says something,
// skipping *url.Error (whose message repeats the full URL, query string included).
func innermost(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + " request failed: " + innermost(ue.Err)
	}
	return err.Error()
}

// redactor scrubs secrets out of text the connector emits and out of the messages an
// Upstream relays (see scrubMessage).
type redactor struct {
	// configured are the secrets of the Config: header values, the URL's query and
	// userinfo, the OAuth client secret and key. Nil means none.
	configured *secretList
	// issued returns the secrets minted at run time (OAuth access tokens and client
	// assertions), a list that grows as tokens are renewed; nil when there are none.
	issued func() *secretList
}

// newRedactor returns a redactor of the configured secrets.
func newRedactor(secrets []string) redactor {
	l := newSecretList(secrets)
	return redactor{configured: &l}
}

// redact replaces every secret in s, the configured and the issued ones, and only that:
// unlike scrub it neither cuts s nor touches URLs, for the server's own text (tool
// descriptions, instructions) rather than a message of ours.
func (r redactor) redact(s string) string {
	return redactAll(s, r.lists())
}

// scrub replaces every secret in s and cuts it to maxMessageLen.
func (r redactor) scrub(s string) string {
	s = ScrubQueries(r.redact(s))
	if len(s) > maxMessageLen {
		s = TruncateUTF8(s, maxMessageLen-3) + "..."
	}
	return s
}

// scrubError returns a copy of e whose message has been scrubbed.
func (r redactor) scrubError(e *Error) *Error {
	if e == nil {
		return nil
	}
	out := *e
	out.Message = r.scrub(e.Message)
	return &out
}

// ScrubQueries drops the query string of every http(s) URL quoted in s, as a second
// line of defence behind never formatting a raw URL in the first place.
func ScrubQueries(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		// Copy up to and including "://", then the URL up to its query.
		b.WriteString(s[:i+3])
		s = s[i+3:]
		end := strings.IndexAny(s, " \t\n\"'<>")
		if end < 0 {
			end = len(s)
		}
		u := s[:end]
		if q := strings.IndexAny(u, "?#"); q >= 0 {
			u = u[:q]
		}
		b.WriteString(u)
		s = s[end:]
	}
}

// wire is e as the JSON-RPC error that answers a call the connector could not deliver
// or get answered: the reason leads the message, and the data names it alone
// ({"reason": "InvalidGrant"}) so that whoever relays the answer can tell why without
// reading the message (see ReasonOf).
func (e *Error) wire() *jsonrpc.Error {
	data, _ := json.Marshal(wireReason{Reason: e.Reason})
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: e.Reason + ": " + e.Message, Data: data}
}

// wireReason is the data of a JSON-RPC error the connector answers with.
type wireReason struct {
	Reason string `json:"reason"`
}

// ReasonOf returns the reason of err: an *Error's, or the one the connector put in a
// JSON-RPC error it answered a call with. It returns "" for any other error. A server's
// own JSON-RPC error could claim a reason the same way; only a reason-shaped word is
// taken from it, so a claim is at worst a wrong word, never text of the server's.
func ReasonOf(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Reason
	}
	if wire, ok := errors.AsType[*jsonrpc.Error](err); ok && wire.Code == jsonrpc.CodeInternalError && len(wire.Data) > 0 {
		var data wireReason
		if json.Unmarshal(wire.Data, &data) == nil && reasonShaped.MatchString(data.Reason) && strings.HasPrefix(wire.Message, data.Reason+": ") {
			return data.Reason
		}
	}
	return ""
}

// reasonShaped is what a condition reason looks like.
var reasonShaped = regexp.MustCompile(`^[A-Z][A-Za-z]{1,63}$`)

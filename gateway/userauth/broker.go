// Package userauth is the gateway's broker of per-person authorization
// (spec.http.auth.oauth2.perUser): it starts a person's authorization when a caller
// without a grant calls a perUser server (Start, whose URL the gateway elicits), serves
// the page the person opens first (which asks for the one-time code the client showed,
// so that the link alone is not enough) and the callback the authorization server
// sends the person's browser back to (<gateway public URL>/oauth2/callback), and tells
// the gateway when a person's grant is stored (OnComplete), so it can send
// notifications/elicitation/complete and retry.
//
// Pending authorizations live sealed in Secrets (internal/usergrants), so any replica
// can serve each step; each is single use (consumed by a delete that only one replica
// can win), expires after FlowLife, and is bound to the caller, the server and the
// elicitation it was started for, and, once the code was entered, to the browser that
// entered it (a cookie only that browser holds).
//
// What goes to the authorization server (the authorization URL, the code exchange) is
// the connector's (connector.UserAuthorizer): the broker never holds a token and never
// makes an outbound request. It must not import the controllers or the catalogue; it
// never logs or shows a code, a state, a verifier or a token.
package userauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/internal/usergrants"
)

// Defaults and bounds.
const (
	// DefaultFlowLife is how long an authorization may take from Start to callback.
	DefaultFlowLife = 10 * time.Minute
	// DefaultMaxPending bounds the authorizations one caller may have in flight.
	DefaultMaxPending = 8
	// maxCodeAttempts is how many wrong codes end an authorization.
	maxCodeAttempts = 5
	// maxStateLen bounds the state parameter a callback may carry.
	maxStateLen = 256
	// CallbackPath is the redirect URI's path, under the gateway's public URL.
	CallbackPath = "/oauth2/callback"
	// AuthorizePath begins the URL of the page a person opens first.
	AuthorizePath = "/oauth2/authorize/"
	// codeAlphabet has no letters or digits a person confuses (0/O, 1/I/L).
	codeAlphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
)

// Completed is a person's authorization that stored a grant.
type Completed struct {
	// ElicitationID is the id Start returned: the gateway's URL elicitation.
	ElicitationID string
	// CallerKey is the caller the authorization was started for.
	CallerKey string
	// Server is the server the grant is for.
	Server connector.Key
}

// Started is a person's authorization in flight, as the gateway elicits it.
type Started struct {
	// URL is the page the person opens: Switchboard's own, on the gateway's public URL.
	URL string
	// ElicitationID is the URL elicitation's id (elicitationId); OnComplete names it.
	ElicitationID string
	// Code is the one-time code the client shows the person, who enters it on the
	// page. It is as secret as the URL: never logged.
	Code string
	// Message is what the elicitation says to the person, the code included.
	Message string
	// Expires is when the URL stops working.
	Expires time.Time
}

// Broker runs persons' authorizations. Its fields are set before use; it is safe for
// concurrent use afterwards.
type Broker struct {
	// PublicURL is the gateway's public URL (--gateway-public-url), without a trailing
	// slash: the page and the redirect URI are under it.
	PublicURL string
	// Authorizer returns the connector's authorizer of a perUser server, or nil when
	// the server takes no per-person authorization (or is unknown).
	Authorizer func(connector.Key) *connector.UserAuthorizer
	// Flows keeps the authorizations in flight, Keys seals them.
	Flows *usergrants.Blobs
	Keys  usergrants.Sealer
	// Grants is the grant store, for revocations and the admin's list.
	Grants *usergrants.Store
	// FlowLife is how long an authorization may take; zero means DefaultFlowLife.
	FlowLife time.Duration
	// MaxPending bounds one caller's authorizations in flight; zero means
	// DefaultMaxPending.
	MaxPending int
	// Logger logs completions and refusals, never a secret; nil logs nothing.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu         sync.Mutex
	onComplete []func(Completed)
	// started are the authorizations this replica started and may offer again: a
	// person's calls before they open the link (a tools/list, a retry, another
	// session's) get the same link and code rather than one more authorization each.
	started map[startedFor]startedFlow
}

// startedFor names whose authorization of which server a started flow is.
type startedFor struct {
	callerKey string
	server    connector.Key
}

// startedFlow is a flow this replica started: its id and what Start answered.
type startedFlow struct {
	id string
	st Started
}

// maxStarted bounds the started flows a replica remembers to offer again.
const maxStarted = 4096

// reofferMargin is how long before its expiry a started flow is no longer offered
// again: the person should have time to use it.
const reofferMargin = 2 * time.Minute

// ErrNotPerUser is Start's error for a server that takes no per-person authorization.
var ErrNotPerUser = errors.New("the server takes no per-person authorization")

// stage is where an authorization is.
type stage string

const (
	// stageNew waits for the person to enter the code.
	stageNew stage = "new"
	// stageSent has sent the person's browser to the authorization server.
	stageSent stage = "sent"
)

// flow is what is sealed of an authorization in flight.
type flow struct {
	CallerKey     string `json:"ck"`
	Provider      string `json:"pv"`
	Username      string `json:"un"`
	Namespace     string `json:"ns"`
	Name          string `json:"nm"`
	ElicitationID string `json:"eid"`
	CodeHash      []byte `json:"ch"`
	Attempts      int    `json:"at,omitempty"`
	Stage         stage  `json:"st"`
	Verifier      string `json:"pkce,omitempty"`
	StateHash     []byte `json:"sh,omitempty"`
	BrowserHash   []byte `json:"bh,omitempty"`
	Issuer        string `json:"iss,omitempty"`
	// ClientID and ClientSecret are the client the authorization request named (a
	// registered one, when the server has none configured), which exchanges the code.
	ClientID     string    `json:"cid,omitempty"`
	ClientSecret string    `json:"cs,omitempty"`
	Expires      time.Time `json:"exp"`
}

func (f *flow) server() connector.Key { return connector.Key{Namespace: f.Namespace, Name: f.Name} }

func (f *flow) caller() connector.Caller {
	return connector.Caller{Key: f.CallerKey, Provider: f.Provider}
}

// OnComplete registers fn to be called once a person's grant is stored, on the replica
// that served the callback.
func (b *Broker) OnComplete(fn func(Completed)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onComplete = append(b.onComplete, fn)
}

func (b *Broker) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

func (b *Broker) life() time.Duration {
	if b.FlowLife > 0 {
		return b.FlowLife
	}
	return DefaultFlowLife
}

func (b *Broker) log() *slog.Logger {
	if b.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return b.Logger
}

// RedirectURL is the redirect URI to register at authorization servers.
func (b *Broker) RedirectURL() string { return strings.TrimRight(b.PublicURL, "/") + CallbackPath }

// Start starts caller's authorization of server: the URL to elicit, its id and the
// one-time code. A caller that has no person to authorize (a Kubernetes ServiceAccount)
// or another provider's caller is refused with the connector's error, which names what
// an admin can do instead; a server that takes no per-person authorization with
// ErrNotPerUser.
func (b *Broker) Start(ctx context.Context, caller connector.Caller, username string, server connector.Key) (*Started, error) {
	auth := b.Authorizer(server)
	if auth == nil {
		return nil, ErrNotPerUser
	}
	if e := auth.CheckCaller(caller); e != nil {
		return nil, e
	}
	if st := b.reoffer(ctx, startedFor{caller.Key, server}); st != nil {
		return st, nil
	}
	callerDigest := usergrants.Digest("caller", caller.Key)
	pending, err := b.Flows.List(ctx, usergrants.KindFlow, map[string]string{usergrants.LabelCaller: callerDigest})
	if err != nil {
		return nil, err
	}
	live := 0
	for _, p := range pending {
		if b.expired(p) {
			_ = b.Flows.Delete(ctx, p.Name, p.Version)
			continue
		}
		live++
	}
	if live >= b.maxPending() {
		return nil, fmt.Errorf("the caller has %d authorizations in flight, the most allowed: finish or let one expire first", live)
	}
	id, eid := randomText(32), randomText(16)
	code := oneTimeCode()
	now := b.now()
	f := &flow{
		CallerKey: caller.Key, Provider: caller.Provider, Username: username, Namespace: server.Namespace, Name: server.Name,
		ElicitationID: eid, CodeHash: digest(code), Stage: stageNew, Expires: now.Add(b.life()),
	}
	sealed, err := b.seal(ctx, id, f)
	if err != nil {
		return nil, err
	}
	if err := b.Flows.Create(ctx, usergrants.KindFlow, usergrants.Blob{
		Name:   flowSecretName(id),
		Labels: map[string]string{usergrants.LabelCaller: callerDigest},
		Annotations: map[string]string{
			usergrants.AnnotationUsername: username, usergrants.AnnotationServer: server.String(),
			usergrants.AnnotationExpires: f.Expires.UTC().Format(time.RFC3339),
		},
		Sealed: sealed,
	}); err != nil {
		return nil, err
	}
	st := Started{
		URL:           strings.TrimRight(b.PublicURL, "/") + AuthorizePath + id,
		ElicitationID: eid,
		Code:          code,
		Message: fmt.Sprintf("Server %s acts with your own account there. Open the link and enter the code %s to authorize it (valid for %d minutes).",
			server, code, int(b.life().Minutes())),
		Expires: f.Expires,
	}
	b.remember(startedFor{caller.Key, server}, startedFlow{id: id, st: st})
	return &st, nil
}

// reoffer returns the authorization this replica started for k when the person has
// not opened it yet and it has time left, or nil.
func (b *Broker) reoffer(ctx context.Context, k startedFor) *Started {
	b.mu.Lock()
	sf, ok := b.started[k]
	b.mu.Unlock()
	if !ok {
		return nil
	}
	if b.now().Add(reofferMargin).Before(sf.st.Expires) {
		if f, _, refused := b.load(ctx, sf.id); refused == nil && f.Stage == stageNew && f.CallerKey == k.callerKey && f.server() == k.server {
			st := sf.st
			return &st
		}
	}
	b.mu.Lock()
	if cur, ok := b.started[k]; ok && cur.id == sf.id {
		delete(b.started, k)
	}
	b.mu.Unlock()
	return nil
}

// remember keeps sf to offer again, forgetting expired flows (or all) when full.
func (b *Broker) remember(k startedFor, sf startedFlow) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started == nil {
		b.started = make(map[startedFor]startedFlow)
	}
	if len(b.started) >= maxStarted {
		now := b.now()
		for old, f := range b.started {
			if !now.Before(f.st.Expires) {
				delete(b.started, old)
			}
		}
		if len(b.started) >= maxStarted {
			clear(b.started)
		}
	}
	b.started[k] = sf
}

func (b *Broker) maxPending() int {
	if b.MaxPending > 0 {
		return b.MaxPending
	}
	return DefaultMaxPending
}

// expired reports whether the flow Secret's expiry annotation has passed (or is
// unreadable).
func (b *Broker) expired(bl usergrants.Blob) bool {
	t, err := time.Parse(time.RFC3339, bl.Annotations[usergrants.AnnotationExpires])
	return err != nil || !b.now().Before(t)
}

// Revoke removes caller's grant for server: the person authorizes again on their next
// call.
func (b *Broker) Revoke(ctx context.Context, callerKey string, server connector.Key) error {
	if auth := b.Authorizer(server); auth != nil {
		return auth.Revoke(ctx, callerKey)
	}
	return b.Grants.DeleteGrant(ctx, connector.GrantKey{Caller: callerKey, Server: server})
}

// List returns whose grants exist, for which servers, without any token; callerKey,
// when set, lists that caller's only.
func (b *Broker) List(ctx context.Context, callerKey string) ([]usergrants.GrantInfo, error) {
	return b.Grants.List(ctx, callerKey)
}

// flowSecretName is the name of the Secret of flow id.
func flowSecretName(id string) string { return "switchboard-flow-" + usergrants.Digest("flow", id) }

// flowAAD binds a sealed flow to its id.
func flowAAD(id string) []byte { return []byte("switchboard/user-flow/v1\x00" + id) }

func (b *Broker) seal(ctx context.Context, id string, f *flow) ([]byte, error) {
	plain, err := json.Marshal(f) //nolint:gosec // the plaintext sealed below, never stored or logged as it is
	if err != nil {
		return nil, fmt.Errorf("encoding the authorization: %w", err)
	}
	return b.Keys.Seal(ctx, plain, flowAAD(id))
}

// load returns the flow of id and its Secret, or a refusal.
func (b *Broker) load(ctx context.Context, id string) (*flow, *usergrants.Blob, *refusal) {
	bl, err := b.Flows.Get(ctx, usergrants.KindFlow, flowSecretName(id))
	if errors.Is(err, usergrants.ErrNotFound) {
		return nil, nil, refuse(410, "unknown", "This authorization link is unknown, was used already or has expired. Call the tool again for a new one.")
	}
	if err != nil {
		b.log().Error("Reading an authorization failed", "error", err.Error())
		return nil, nil, refuse(503, "unavailable", "The authorization cannot be read right now; try again.")
	}
	plain, err := b.Keys.Open(ctx, bl.Sealed, flowAAD(id))
	if err != nil {
		return nil, nil, refuse(410, "unknown", "This authorization link is unknown, was used already or has expired. Call the tool again for a new one.")
	}
	var f flow
	if err := json.Unmarshal(plain, &f); err != nil {
		return nil, nil, refuse(410, "unknown", "This authorization link is unknown.")
	}
	if !b.now().Before(f.Expires) {
		_ = b.Flows.Delete(ctx, bl.Name, bl.Version)
		return nil, nil, refuse(410, "expired", "This authorization link has expired. Call the tool again for a new one.")
	}
	return &f, bl, nil
}

// refusal is a page's refusal: a status, a reason for the log and a sentence for the
// person.
type refusal struct {
	status int
	reason string
	text   string
}

func refuse(status int, reason, text string) *refusal { return &refusal{status, reason, text} }

// randomText returns n random bytes, base64url without padding.
func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// oneTimeCode returns eight characters of codeAlphabet as XXXX-XXXX (about 40 bits).
func oneTimeCode() string {
	var sb strings.Builder
	for i := range 8 {
		if i == 4 {
			sb.WriteByte('-')
		}
		n, _ := rand.Int(rand.Reader, big.NewInt(int64(len(codeAlphabet))))
		sb.WriteByte(codeAlphabet[n.Int64()])
	}
	return sb.String()
}

// normalizeCode reads what a person typed: case and separators aside.
func normalizeCode(s string) string {
	s = strings.ToUpper(s)
	var sb strings.Builder
	for _, r := range s {
		if strings.ContainsRune(codeAlphabet, r) {
			sb.WriteRune(r)
		}
	}
	out := sb.String()
	if len(out) == 8 {
		return out[:4] + "-" + out[4:]
	}
	return out
}

func digest(s string) []byte {
	d := sha256.Sum256([]byte(s))
	return d[:]
}

func sameDigest(s string, want []byte) bool {
	return len(want) == sha256.Size && subtle.ConstantTimeCompare(digest(s), want) == 1
}

// newVerifier is a PKCE code verifier (RFC 7636).
func newVerifier() string { return oauth2.GenerateVerifier() }

// AuthorizationRequired is the answer to a call of caller, who holds no grant for the
// perUser server key names: a URL elicitation of a new authorization (-32042,
// URLElicitationRequired, SEP-1036), whose message shows the one-time code. When no
// authorization can be started (too many in flight, the store unavailable) it is an
// error saying why, naming no secret. The connector's pool calls it
// (connector.Options.AuthorizationRequired).
func (b *Broker) AuthorizationRequired(ctx context.Context, key connector.Key, caller connector.Caller) *jsonrpc.Error {
	st, err := b.Start(ctx, caller, caller.Username, key)
	if err != nil {
		if e, ok := errors.AsType[*connector.Error](err); ok {
			return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: e.Reason + ": " + e.Message}
		}
		b.log().Error("Starting a person's authorization failed", "server", key.String(), "error", err.Error())
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
			Message: fmt.Sprintf("%s: server %s acts for each person with their own account, and no authorization could be started: %s",
				connector.ReasonAuthorizationRequired, key, err)}
	}
	b.log().Info("Person's authorization started", "username", caller.Username, "server", key.String())
	data, err := json.Marshal(map[string]any{"elicitations": []*mcp.ElicitParams{st.Elicitation()}})
	if err != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	}
	return &jsonrpc.Error{Code: mcp.CodeURLElicitationRequired, Message: st.Message, Data: data}
}

// Elicitation is the URL elicitation that asks the person to open st.URL.
func (st *Started) Elicitation() *mcp.ElicitParams {
	return &mcp.ElicitParams{Mode: "url", URL: st.URL, ElicitationID: st.ElicitationID, Message: st.Message}
}

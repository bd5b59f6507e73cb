package connector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Grants of persons (perUser, peruser.go).
//
// A person who authorized Switchboard at a server's authorization server leaves a
// grant: the access token and refresh token issued to them for that server. Grants are
// kept in a GrantStore that every replica of the manager reads, encrypted at rest; the
// connector defines what it needs of one and knows nothing of where it keeps them (the
// manager's implementation, internal/usergrants, keeps each in a Kubernetes Secret).

// ErrNoGrant is what a GrantStore returns for a grant it does not hold.
var ErrNoGrant = errors.New("no grant")

// GrantKey names one person's grant for one server: the caller's stable identity
// (identity.Caller.Key, [Caller.Key]) and the server.
type GrantKey struct {
	// Caller is the caller's identity key.
	Caller string
	// Server is the server the grant is for.
	Server Key
}

// Grant is one person's tokens for one server. AccessToken and RefreshToken are secrets:
// a Grant printed or logged whole shows neither (String, Format and LogValue name the
// person and the server only).
type Grant struct {
	// Key names whose grant it is, for which server.
	Key GrantKey
	// Username is the person's username (identity.Caller.Username), for the admin's
	// list of grants; not a secret.
	Username string
	// Issuer is the issuer identifier of the authorization server that issued the
	// tokens; a grant is used only while the server's authorization server is this one.
	Issuer string
	// AccessToken is sent to the server, for this person's requests only.
	AccessToken string
	// RefreshToken renews AccessToken; empty when the authorization server issued none.
	RefreshToken string
	// Expiry is when AccessToken expires; zero when unknown.
	Expiry time.Time
	// Updated is when the grant was issued or last refreshed.
	Updated time.Time
	// Client is the client the tokens were issued to, which refreshes them; zero for the
	// server's configured client.
	Client OAuthClient
}

// String names the grant without its tokens.
func (g *Grant) String() string {
	if g == nil {
		return "<no grant>"
	}
	return fmt.Sprintf("grant of %q for server %s", g.Username, g.Key.Server)
}

// Format prints the grant as String does, whatever the verb, so that %v and %+v never
// print its tokens.
func (g *Grant) Format(f fmt.State, _ rune) { _, _ = fmt.Fprint(f, g.String()) }

// LogValue logs the person and the server only.
func (g *Grant) LogValue() slog.Value {
	if g == nil {
		return slog.StringValue("<no grant>")
	}
	return slog.GroupValue(slog.String("username", g.Username), slog.String("server", g.Key.Server.String()))
}

// GrantStore keeps persons' grants where every replica of the manager can read them,
// encrypted at rest. Implementations must be safe for concurrent use, and must bind each
// stored grant to its GrantKey so that a grant copied under another key does not load.
type GrantStore interface {
	// LoadGrant returns the grant of k, or an error wrapping ErrNoGrant when there is
	// none (or what is stored for k does not decrypt for k).
	LoadGrant(ctx context.Context, k GrantKey) (*Grant, error)
	// SaveGrant stores g under g.Key, replacing what was there.
	SaveGrant(ctx context.Context, g *Grant) error
	// DeleteGrant removes the grant of k; a grant that is not there is no error.
	DeleteGrant(ctx context.Context, k GrantKey) error
}

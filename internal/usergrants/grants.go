package usergrants

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/switchboard-mcp/switchboard/connector"
)

// Store is the manager's connector.GrantStore: each grant sealed in a Secret named by a
// digest of its caller and server, bound to both.
type Store struct {
	// Blobs keeps the Secrets.
	Blobs *Blobs
	// Keys seals and opens.
	Keys Sealer
}

var _ connector.GrantStore = (*Store)(nil)

// grantSecretPrefix begins every grant Secret's name.
const grantSecretPrefix = "switchboard-grant-"

// GrantSecretName is the name of the Secret of k's grant.
func GrantSecretName(k connector.GrantKey) string {
	return grantSecretPrefix + Digest("grant", k.Caller, k.Server.Namespace, k.Server.Name)
}

// grantAAD binds a sealed grant to its caller and server.
func grantAAD(k connector.GrantKey) []byte {
	return fmt.Appendf(nil, "switchboard/user-grant/v1\x00%d:%s\x00%d:%s\x00%d:%s",
		len(k.Caller), k.Caller, len(k.Server.Namespace), k.Server.Namespace, len(k.Server.Name), k.Server.Name)
}

// sealedGrant is what is sealed: the tokens and what goes with them.
type sealedGrant struct {
	Issuer       string    `json:"iss"`
	AccessToken  string    `json:"at"`
	RefreshToken string    `json:"rt,omitempty"`
	Expiry       time.Time `json:"exp,omitzero"`
	Updated      time.Time `json:"upd,omitzero"`
	ClientID     string    `json:"cid,omitempty"`
	ClientSecret string    `json:"cs,omitempty"`
}

// LoadGrant implements connector.GrantStore. A grant that does not open for k (copied
// from another caller's or server's Secret, tampered, or sealed with a key removed from
// the key Secret) is no grant.
func (s *Store) LoadGrant(ctx context.Context, k connector.GrantKey) (*connector.Grant, error) {
	bl, err := s.Blobs.Get(ctx, KindGrant, GrantSecretName(k))
	if errors.Is(err, ErrNotFound) {
		return nil, connector.ErrNoGrant
	}
	if err != nil {
		return nil, err
	}
	plain, err := s.Keys.Open(ctx, bl.Sealed, grantAAD(k))
	if errors.Is(err, ErrNotSealedForThis) {
		return nil, fmt.Errorf("%w: %w", connector.ErrNoGrant, err)
	}
	if err != nil {
		return nil, err
	}
	var sg sealedGrant
	if err := json.Unmarshal(plain, &sg); err != nil {
		return nil, fmt.Errorf("%w: the grant does not decode", connector.ErrNoGrant)
	}
	return &connector.Grant{
		Key: k, Username: bl.Annotations[AnnotationUsername], Issuer: sg.Issuer,
		AccessToken: sg.AccessToken, RefreshToken: sg.RefreshToken, Expiry: sg.Expiry, Updated: sg.Updated,
		Client: connector.OAuthClient{ID: sg.ClientID, Secret: sg.ClientSecret},
	}, nil
}

// SaveGrant implements connector.GrantStore.
func (s *Store) SaveGrant(ctx context.Context, g *connector.Grant) error {
	//nolint:gosec // the plaintext sealed below, never stored or logged as it is
	plain, err := json.Marshal(sealedGrant{Issuer: g.Issuer, AccessToken: g.AccessToken, RefreshToken: g.RefreshToken, Expiry: g.Expiry, Updated: g.Updated,
		ClientID: g.Client.ID, ClientSecret: g.Client.Secret})
	if err != nil {
		return fmt.Errorf("encoding the grant: %w", err)
	}
	sealed, err := s.Keys.Seal(ctx, plain, grantAAD(g.Key))
	if err != nil {
		return err
	}
	return s.Blobs.Put(ctx, KindGrant, Blob{
		Name:        GrantSecretName(g.Key),
		Labels:      map[string]string{LabelCaller: Digest("caller", g.Key.Caller)},
		Annotations: map[string]string{AnnotationUsername: g.Username, AnnotationServer: g.Key.Server.String()},
		Sealed:      sealed,
	})
}

// DeleteGrant implements connector.GrantStore.
func (s *Store) DeleteGrant(ctx context.Context, k connector.GrantKey) error {
	err := s.Blobs.Delete(ctx, GrantSecretName(k), "")
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// GrantInfo is what an admin may see of a grant: whose, for which server, since when.
type GrantInfo struct {
	// Username is the person's username.
	Username string `json:"username"`
	// Server is the server, namespace/name.
	Server string `json:"server"`
	// Secret is the name of the Secret that holds it; deleting it revokes the grant.
	Secret string `json:"secret"`
	// Created is when the grant was first stored.
	Created time.Time `json:"created"`
}

// List returns whose grants exist, for which servers, without opening any: no token is
// read. callerKey, when set, lists that caller's only.
func (s *Store) List(ctx context.Context, callerKey string) ([]GrantInfo, error) {
	var labels map[string]string
	if callerKey != "" {
		labels = map[string]string{LabelCaller: Digest("caller", callerKey)}
	}
	blobs, err := s.Blobs.List(ctx, KindGrant, labels)
	if err != nil {
		return nil, err
	}
	out := make([]GrantInfo, 0, len(blobs))
	for _, b := range blobs {
		out = append(out, GrantInfo{Username: b.Annotations[AnnotationUsername], Server: b.Annotations[AnnotationServer], Secret: b.Name, Created: b.Created})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Username != out[j].Username {
			return out[i].Username < out[j].Username
		}
		return out[i].Server < out[j].Server
	})
	return out, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/gateway/userauth"
	"github.com/switchboard-mcp/switchboard/internal/usergrants"
)

// userAuthorizations are persons' grants of perUser servers and the broker of their
// authorizations (--user-grants-key-secret): the grants and the authorizations in flight
// are Secrets beside the key Secret, sealed with its keys. The pool, made after them,
// is set once it exists; the broker asks it for each server's authorizer.
type userAuthorizations struct {
	store  *usergrants.Store
	broker *userauth.Broker
	pool   *connector.Pool
}

// newUserAuthorizations returns the manager's userAuthorizations, or nil without
// --user-grants-key-secret. Its errors name the flag and the Secret, never a key.
func (o *managerOptions) newUserAuthorizations(mgr ctrl.Manager) (*userAuthorizations, error) {
	if o.userGrantsKeySecret == "" {
		return nil, nil
	}
	namespace, name, ok := strings.Cut(o.userGrantsKeySecret, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("--user-grants-key-secret %q is not NAMESPACE/NAME", o.userGrantsKeySecret)
	}
	if o.gatewayPublicURL == "" {
		return nil, errors.New("--user-grants-key-secret needs --gateway-public-url: authorization servers send persons back to <gateway public URL>" + userauth.CallbackPath)
	}
	// Straight to the API server: the manager's cache holds no Secret data, and grants
	// are read by whichever replica serves the person's next call.
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("creating the grants' API client: %w", err)
	}
	keys := &usergrants.SecretKeys{Reader: direct, Secret: types.NamespacedName{Namespace: namespace, Name: name}}
	if _, err := keys.Keyring(context.Background()); err != nil {
		return nil, fmt.Errorf("--user-grants-key-secret: %w", err)
	}
	blobs := &usergrants.Blobs{Client: direct, Namespace: namespace}
	ua := &userAuthorizations{store: &usergrants.Store{Blobs: blobs, Keys: keys}}
	ua.broker = &userauth.Broker{
		PublicURL: strings.TrimRight(o.gatewayPublicURL, "/"),
		Authorizer: func(k connector.Key) *connector.UserAuthorizer {
			if ua.pool == nil {
				return nil
			}
			return ua.pool.UserAuthorizer(k)
		},
		Flows:  blobs,
		Keys:   keys,
		Grants: ua.store,
		Logger: slog.New(logr.ToSlogHandler(ctrl.Log.WithName("authorizations"))),
	}
	return ua, nil
}

// poolOptions fills in what the pool needs of persons' authorizations.
func (ua *userAuthorizations) poolOptions(opts *connector.Options) {
	if ua == nil {
		return
	}
	opts.Grants = ua.store
	opts.AuthorizationRequired = func(ctx context.Context, key connector.Key, caller connector.Caller) *jsonrpc.Error {
		return ua.broker.AuthorizationRequired(ctx, key, caller)
	}
}

package sessionless_test

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/internal/sessionless"
)

// Every result that carries caching hints is made private, and nothing else is touched.
func TestKeepPrivateCoversEveryCacheableResult(t *testing.T) {
	public := mcp.Cacheable{TTLMs: 60000, CacheScope: sessionless.CachePublic}
	results := []mcp.CacheableResult{
		&mcp.DiscoverResult{Cacheable: public},
		&mcp.ListToolsResult{Cacheable: public},
		&mcp.ListResourcesResult{Cacheable: public},
		&mcp.ListResourceTemplatesResult{Cacheable: public},
		&mcp.ListPromptsResult{Cacheable: public},
		&mcp.ReadResourceResult{Cacheable: public},
	}
	for _, res := range results {
		sessionless.KeepPrivate(res)
		if res.GetCacheScope() != sessionless.CachePrivate || res.GetTTLMs() != public.TTLMs {
			t.Errorf("%T: cacheScope %q, ttlMs %d after KeepPrivate; want private and the ttl kept", res, res.GetCacheScope(), res.GetTTLMs())
		}
	}
	sessionless.KeepPrivate(nil)
	sessionless.KeepPrivate((*mcp.ListToolsResult)(nil))
	sessionless.KeepPrivate(&mcp.CallToolResult{})
	if sessionless.CacheScope(true) != "private" || sessionless.CacheScope(false) != "public" {
		t.Error("CacheScope: want private when authenticated, public otherwise")
	}
}

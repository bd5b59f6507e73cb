package catalog

import "time"

// WithRequestTimeouts shortens the read and write deadlines of the catalogue's own
// routes, so a test can outlast them quickly.
func WithRequestTimeouts(read, write time.Duration) func(*Options) {
	return func(o *Options) {
		o.requestReadTimeout, o.requestWriteTimeout = read, write
	}
}

// MCPCacheTTLMs is the ttlMs the catalogue's MCP endpoint puts on its list answers.
const MCPCacheTTLMs = int(mcpCacheTTL / time.Millisecond)

// WithRegistryReviews bounds the entries one registry request reviews to n.
func WithRegistryReviews(n int) func(*Options) {
	return func(o *Options) { o.registryReviews = n }
}

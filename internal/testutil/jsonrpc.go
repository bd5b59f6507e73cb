package testutil

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// ID is the JSON-RPC id of v (a string, or a number as JSON decodes one: float64 or
// int64), failing t when v cannot be one.
func ID(t testing.TB, v any) jsonrpc.ID {
	t.Helper()
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

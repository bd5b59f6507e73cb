package connector

import (
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// ReasonOf tells the connector's answers apart by their reason, through any wrapping,
// and takes no text of a server's own error that claims to be one.
func TestReasonOfReadsTheConnectorsAnswersOnly(t *testing.T) {
	refused := authError(ReasonInvalidGrant, ReasonInvalidGrant, "token exchange at https://sts.example.com refused the grant")
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"an *Error", refused, ReasonInvalidGrant},
		{"the JSON-RPC answer made of it, wrapped", fmt.Errorf("calling %q: %w", "initialize", refused.wire()), ReasonInvalidGrant},
		{"a server's own error", &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "database down"}, ""},
		{"a server's error claiming a reason of text", &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
			Message: "Injected text here: boom", Data: []byte(`{"reason":"Injected text here"}`)}, ""},
		{"a server's error claiming a reason its message does not lead with", &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
			Message: "boom", Data: []byte(`{"reason":"InvalidGrant"}`)}, ""},
		{"another error", fmt.Errorf("plain"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReasonOf(tc.err); got != tc.want {
				t.Errorf("ReasonOf(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

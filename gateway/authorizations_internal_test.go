package gateway

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A client's answer under the gateway's own authorization key never reaches the server,
// whatever else the call carries: a client cannot smuggle it upstream, and the server's
// own requestState and answers go on untouched.
func TestTheGatewaysAuthorizationAnswerIsNeverForwarded(t *testing.T) {
	accept := &mcp.ElicitResult{Action: "accept"}
	for _, tc := range []struct {
		name      string
		params    *mcp.CallToolParamsRaw
		wantKeys  []string
		wantState string
	}{
		{"the gateway's answer alone", &mcp.CallToolParamsRaw{InputResponses: mcp.InputResponseMap{authorizationInputKey: accept}}, nil, ""},
		{"beside the server's own answer and state", &mcp.CallToolParamsRaw{
			InputResponses: mcp.InputResponseMap{authorizationInputKey: accept, "server.question": accept},
			RequestState:   "server-state-1",
		}, []string{"server.question"}, "server-state-1"},
		{"beside an approval of the gateway's", &mcp.CallToolParamsRaw{
			InputResponses: mcp.InputResponseMap{authorizationInputKey: accept, approvalInputKey: accept, "server.question": accept},
			RequestState:   approvalStatePrefix + "abc",
		}, []string{"server.question"}, ""},
		{"nothing of the gateway's", &mcp.CallToolParamsRaw{
			InputResponses: mcp.InputResponseMap{"server.question": accept}, RequestState: "server-state-2",
		}, []string{"server.question"}, "server-state-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept, state := forwardedInput(tc.params)
			if got := slices.Sorted(maps.Keys(kept)); !slices.Equal(got, tc.wantKeys) || state != tc.wantState {
				t.Errorf("forwarded answers %v and state %q; want %v and %q", got, state, tc.wantKeys, tc.wantState)
			}
		})
	}
}

// Only an upstream's URL elicitation of exactly one URL request becomes input_required,
// and only for a client that declared URL elicitation; anything else stays the error it
// was, so a server cannot turn a form or several requests into the gateway's question.
func TestOnlyOneURLElicitationBecomesInputRequired(t *testing.T) {
	urlClient := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Meta: mcp.Meta{
		mcp.MetaKeyClientCapabilities: map[string]any{"elicitation": map[string]any{"url": map[string]any{}}},
	}}}
	elicitation := func(modes ...string) error {
		var es []*mcp.ElicitParams
		for i, m := range modes {
			es = append(es, &mcp.ElicitParams{Mode: m, URL: "https://gw.example/oauth2/authorize/x", ElicitationID: string(rune('a' + i)), Message: "authorize"})
		}
		data, _ := json.Marshal(map[string]any{"elicitations": es})
		return &jsonrpc.Error{Code: mcp.CodeURLElicitationRequired, Message: "authorize", Data: data}
	}
	res, ok := authorizationInput(urlClient, elicitation("url"))
	if !ok {
		t.Fatal("one URL elicitation for a client that declared URL elicitation was not asked as input_required")
	}
	wire, _ := json.Marshal(res)
	var got struct {
		ResultType    string `json:"resultType"`
		InputRequests map[string]struct {
			Method string            `json:"method"`
			Params *mcp.ElicitParams `json:"params"`
		} `json:"inputRequests"`
	}
	if json.Unmarshal(wire, &got) != nil || got.ResultType != "input_required" || len(got.InputRequests) != 1 {
		t.Fatalf("the answer is %s; want input_required with one request", wire)
	}
	asked := got.InputRequests[authorizationInputKey]
	if asked.Method != "elicitation/create" || asked.Params == nil || asked.Params.Mode != "url" || asked.Params.URL != "https://gw.example/oauth2/authorize/x" {
		t.Fatalf("the answer is %s; want input_required with the one URL request under %s", wire, authorizationInputKey)
	}
	for name, err := range map[string]error{
		"two elicitations":     elicitation("url", "url"),
		"a form elicitation":   elicitation("form"),
		"another error":        &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "boom"},
		"not a JSON-RPC error": errors.New("boom"),
	} {
		if _, ok := authorizationInput(urlClient, err); ok {
			t.Errorf("%s became input_required", name)
		}
	}
	if _, ok := authorizationInput(&mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{}}, elicitation("url")); ok {
		t.Error("a client that declared no URL elicitation was asked input_required")
	}
}

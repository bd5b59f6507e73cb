// Package conformance runs the official MCP conformance suite's server scenarios against
// go-sdk's conformance server directly, with nothing of Switchboard in between. It proves
// the harness in test/testenv works on a clean machine and shows the baseline the bridge
// and gateway conformance tests compare against: every scenario that passes here must
// pass through them.
//
// Tests only: it holds no code that any other package may import.
package conformance

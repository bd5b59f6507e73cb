package gateway

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"
)

// An approval's requestState approves exactly the call it was issued for, on a replica
// that holds the key it was issued under, until it expires, once.
func TestAnApprovalStateApprovesOneCall(t *testing.T) {
	shared := bytes.Repeat([]byte{7}, approvalKeySize)
	issuer, err := newApprovals(shared)
	if err != nil {
		t.Fatal(err)
	}
	subject := approvalSubject{caller: "key-of-alice", server: "team-a/notes", toolset: "team-a/support-agent",
		tool: "notes_delete_all", args: sha256.Sum256([]byte(`{"force":false}`)), policy: "team-a/notes-access", rule: 3}
	others := map[string]func(s *approvalSubject){
		"caller":    func(s *approvalSubject) { s.caller = "key-of-carol" },
		"server":    func(s *approvalSubject) { s.server = "team-a/tickets" },
		"toolset":   func(s *approvalSubject) { s.toolset = "" },
		"tool":      func(s *approvalSubject) { s.tool = "notes_delete_some" },
		"arguments": func(s *approvalSubject) { s.args = sha256.Sum256([]byte(`{"force":true}`)) },
		"policy":    func(s *approvalSubject) { s.policy = "team-a/other" },
		"rule":      func(s *approvalSubject) { s.rule = 4 },
	}
	for field, change := range others {
		state, err := issuer.issue(subject)
		if err != nil {
			t.Fatal(err)
		}
		other := subject
		change(&other)
		if err := issuer.redeem(state, other); !errors.Is(err, errApprovalUnverified) {
			t.Errorf("a state redeemed for another %s = %v; want it unverified", field, err)
		}
	}

	state, _ := issuer.issue(subject)
	elsewhere, _ := newApprovals(nil) // a replica with a key of its own
	if err := elsewhere.redeem(state, subject); !errors.Is(err, errApprovalUnverified) {
		t.Errorf("a state redeemed on a replica with another key = %v; want it unverified", err)
	}
	sharing, _ := newApprovals(shared)
	if err := sharing.redeem(state, subject); err != nil {
		t.Errorf("a state redeemed on a replica that shares the key = %v; want it to approve", err)
	}
	if err := sharing.redeem(state, subject); !errors.Is(err, errApprovalSpent) {
		t.Errorf("a state redeemed twice = %v; want it spent", err)
	}

	late, _ := issuer.issue(subject)
	issuer.now = func() time.Time { return time.Now().Add(approvalTTL + time.Second) }
	if err := issuer.redeem(late, subject); !errors.Is(err, errApprovalExpired) {
		t.Errorf("a state redeemed after %s = %v; want it expired", approvalTTL, err)
	}
	for _, garbage := range []string{approvalStatePrefix, approvalStatePrefix + "!!", approvalStatePrefix + "AAAA",
		approvalStatePrefix + strings.Repeat("A", 1<<20)} {
		if err := issuer.redeem(garbage, subject); !errors.Is(err, errApprovalUnverified) {
			t.Errorf("redeeming %q = %v; want it unverified", garbage, err)
		}
	}
	if _, err := newApprovals([]byte("short")); err == nil {
		t.Error("a 5-byte approval key was accepted")
	}
}

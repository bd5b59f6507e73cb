package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestInstallSelfCopiesTheRunningBinary(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "switchboard")
	if err := installSelf(dest); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dest)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("installed binary differs from the running one")
	}
	info, err := os.Stat(dest)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm()&0o111 != 0o111 {
		t.Fatalf("installed binary has mode %v, want executable by everyone", info.Mode().Perm())
	}
}

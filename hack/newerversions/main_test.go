package main

import (
	"strings"
	"testing"
)

// A built module keeps every version it asks for that is newer than the project's: thv
// v0.47.0 asks for viper v1.21.0 where the project's build list has v1.12.0, and was once
// built with v1.12.0.
func TestOnlyNewerProjectVersionsAreRequired(t *testing.T) {
	in := strings.Join([]string{
		// Ours older: kept at its own.
		"github.com/spf13/viper v1.21.0 v1.12.0",
		// Ours newer: raised.
		"google.golang.org/grpc v1.70.0 v1.84.0",
		// A staging module's placeholder under a replace: raised.
		"k8s.io/api v0.0.0 v0.37.2",
		// The same: nothing to do.
		"go.uber.org/zap v1.27.1 v1.27.1",
		// Ours an older pseudo-version: kept.
		"golang.org/x/xerrors v0.0.0-20240903120638-7835f813f4da v0.0.0-20220517211312-f3a8303e98df",
		// A release is newer than its candidate: raised.
		"github.com/example/pre v1.2.0-rc.1 v1.2.0",
		// +incompatible majors compare as versions: raised.
		"github.com/docker/docker v28.0.0+incompatible v28.3.3+incompatible",
	}, "\n")
	var out strings.Builder
	if err := newerVersions(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	want := "-require=google.golang.org/grpc@v1.84.0\n" +
		"-require=k8s.io/api@v0.37.2\n" +
		"-require=github.com/example/pre@v1.2.0\n" +
		"-require=github.com/docker/docker@v28.3.3+incompatible\n"
	if out.String() != want {
		t.Errorf("newerVersions wrote\n%s\nwant\n%s", out.String(), want)
	}
}

func TestMalformedLinesAreRefused(t *testing.T) {
	for _, line := range []string{"k8s.io/api v0.37.2", "k8s.io/api latest v0.37.2"} {
		if err := newerVersions(strings.NewReader(line), &strings.Builder{}); err == nil {
			t.Errorf("newerVersions accepted %q", line)
		}
	}
}

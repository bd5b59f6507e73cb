package main

import (
	"errors"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/version"
)

// serverVersion answers ServerVersion with a fixed git version, or fails.
type serverVersion struct {
	git string
	err error
}

func (s serverVersion) ServerVersion() (*version.Info, error) {
	if s.err != nil {
		return nil, s.err
	}
	return &version.Info{GitVersion: s.git}, nil
}

func TestBridgeDeliveryFollowsTheClustersVersion(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, delivery, binary, server string
		serverErr                      error
		want, wantErr                  string
	}{
		{name: "auto on 1.36", delivery: "auto", server: "v1.36.0", want: self},
		{name: "auto on a provider's 1.37", delivery: "auto", server: "v1.37.2-gke.1200", want: self},
		{name: "auto on 1.35", delivery: "auto", server: "v1.35.4", want: ""},
		{name: "auto with the binary given", delivery: "auto", binary: "/ko-app/switchboard", server: "v1.36.1", want: "/ko-app/switchboard"},
		{name: "image volumes asked for on an old cluster", delivery: "image-volume", binary: "/switchboard", server: "v1.30.0", want: "/switchboard"},
		{name: "init container asked for", delivery: "init-container", server: "v1.37.0", want: ""},
		{name: "auto without the server's version", delivery: "auto", serverErr: errors.New("connection refused"), wantErr: "asking the API server its version"},
		{name: "a relative binary", delivery: "image-volume", binary: "switchboard", wantErr: "must be an absolute path"},
		{name: "an unknown delivery", delivery: "copy", wantErr: `--bridge-delivery must be auto, image-volume or init-container, not "copy"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := &managerOptions{bridgeDelivery: tt.delivery, bridgeImageBinary: tt.binary}
			got, err := o.bridgeBinaryInImage(serverVersion{git: tt.server, err: tt.serverErr})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

package main

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"
)

// The ways --bridge-delivery names of getting the bridge binary into stdio server pods.
const (
	bridgeDeliveryAuto          = "auto"
	bridgeDeliveryImageVolume   = "image-volume"
	bridgeDeliveryInitContainer = "init-container"
)

// imageVolumesSince is the first Kubernetes version whose image volumes are GA and
// always on (KEP-4639; beta and on by default since 1.35).
var imageVolumesSince = version.MajorMinor(1, 36)

// bridgeBinaryInImage returns the switchboard binary's path inside the bridge image
// when stdio server pods mount that image as an image volume, or "" when an init
// container copies the binary instead, as --bridge-delivery says.
func (o *managerOptions) bridgeBinaryInImage(server discovery.ServerVersionInterface) (string, error) {
	switch o.bridgeDelivery {
	case bridgeDeliveryInitContainer:
		return "", nil
	case bridgeDeliveryImageVolume:
	case bridgeDeliveryAuto:
		info, err := server.ServerVersion()
		if err != nil {
			return "", fmt.Errorf("--bridge-delivery=auto: asking the API server its version: %w", err)
		}
		v, err := version.ParseGeneric(info.GitVersion)
		if err != nil {
			return "", fmt.Errorf("--bridge-delivery=auto: the API server's version %q: %w", info.GitVersion, err)
		}
		if !v.AtLeast(imageVolumesSince) {
			ctrl.Log.WithName("manager").Info("The API server predates GA image volumes: stdio server pods copy the bridge with an init container",
				"serverVersion", info.GitVersion)
			return "", nil
		}
	default:
		return "", fmt.Errorf("--bridge-delivery must be %s, %s or %s, not %q",
			bridgeDeliveryAuto, bridgeDeliveryImageVolume, bridgeDeliveryInitContainer, o.bridgeDelivery)
	}
	if o.bridgeImageBinary != "" {
		if !filepath.IsAbs(o.bridgeImageBinary) {
			return "", fmt.Errorf("--bridge-image-binary must be an absolute path inside the bridge image, not %q", o.bridgeImageBinary)
		}
		return filepath.Clean(o.bridgeImageBinary), nil
	}
	// The bridge image is the manager's own: the binary is where the manager runs from.
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locating the manager's own binary for --bridge-image-binary: %w", err)
	}
	return self, nil
}

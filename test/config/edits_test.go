package config_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestSetImageAlsoSetsTheBridgeImage follows the README: a user sets the manager image
// with `kustomize edit set image` in config/manager or config/default, and stdio server
// pods must then copy the bridge from that same image.
func TestSetImageAlsoSetsTheBridgeImage(t *testing.T) {
	const image = "registry.example.com/switchboard:v1.2.3"
	setImage := func(kustomization string) string {
		if i := strings.Index(kustomization, "\nimages:\n"); i >= 0 {
			kustomization = kustomization[:i+1] // the list kustomize edit set image rewrites
		}
		return kustomization + "images:\n  - name: switchboard\n    newName: registry.example.com/switchboard\n    newTag: v1.2.3\n"
	}
	for _, dir := range []string{"manager", "default"} {
		t.Run(dir, func(t *testing.T) {
			fsys := editedConfig(t, map[string]func(string) string{dir + "/kustomization.yaml": setImage})
			objs := render(t, fsys, "/config", "default")
			deploy := &appsv1.Deployment{}
			objs.one(t, "Deployment", "manager", deploy)
			c := deploy.Spec.Template.Spec.Containers[0]
			if c.Image != image {
				t.Fatalf("manager image is %q after setting it in config/%s, want %q", c.Image, dir, image)
			}
			for _, e := range c.Env {
				if e.Name == "SWITCHBOARD_IMAGE" && e.Value != image {
					t.Errorf("SWITCHBOARD_IMAGE is %q, want the manager image %q", e.Value, image)
				}
			}
		})
	}
}

// TestPrometheusComponent enables the optional ServiceMonitor the way
// config/default/kustomization.yaml says to, and checks it scrapes the metrics Service.
func TestPrometheusComponent(t *testing.T) {
	const commented = "# components:\n#   - ../prometheus\n"
	fsys := editedConfig(t, map[string]func(string) string{"default/kustomization.yaml": func(s string) string {
		if !strings.Contains(s, commented) {
			t.Fatalf("config/default/kustomization.yaml no longer holds the commented lines %q", commented)
		}
		return strings.Replace(s, commented, "components:\n  - ../prometheus\n", 1)
	}})
	objs := render(t, fsys, "/config", "default")
	if n := len(objs.ofKind("ServiceMonitor")); n != 1 {
		t.Fatalf("config/default with ../prometheus renders %d ServiceMonitors, want 1", n)
	}
	monitor := objs.ofKind("ServiceMonitor")[0]
	if monitor.GetNamespace() != namespace || !strings.HasPrefix(monitor.GetName(), namePrefix) {
		t.Errorf("ServiceMonitor is %s/%s, want namespace %s and prefix %s", monitor.GetNamespace(), monitor.GetName(), namespace, namePrefix)
	}
	svc := &corev1.Service{}
	objs.one(t, "Service", "metrics", svc)
	matchLabels, _, _ := unstructured.NestedStringMap(monitor.Object, "spec", "selector", "matchLabels")
	if !selects(t, &metav1.LabelSelector{MatchLabels: matchLabels}, svc.Labels) {
		t.Errorf("ServiceMonitor selects %v, not the metrics Service %v", matchLabels, svc.Labels)
	}
	catalogSvc := &corev1.Service{}
	objs.one(t, "Service", "catalog", catalogSvc)
	if selects(t, &metav1.LabelSelector{MatchLabels: matchLabels}, catalogSvc.Labels) {
		t.Errorf("ServiceMonitor also selects the catalogue Service %v", catalogSvc.Labels)
	}
	endpoints, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("ServiceMonitor has %d endpoints, want 1", len(endpoints))
	}
	endpoint := endpoints[0].(map[string]any)
	port, _, _ := unstructured.NestedString(endpoint, "port")
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != port {
		t.Errorf("ServiceMonitor scrapes port %q; the metrics Service has %+v", port, svc.Spec.Ports)
	}
	// The manager serves metrics over HTTPS to scrapers with a bearer token.
	scheme, _, _ := unstructured.NestedString(endpoint, "scheme")
	tokenFile, _, _ := unstructured.NestedString(endpoint, "bearerTokenFile")
	if scheme != "https" || tokenFile == "" {
		t.Errorf("ServiceMonitor scrapes with scheme %q and bearer token file %q, want https with the Prometheus ServiceAccount's token", scheme, tokenFile)
	}
}

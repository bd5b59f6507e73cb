package config_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// managerDeployment returns the rendered manager Deployment and its manager container.
func managerDeployment(t *testing.T, objs rendered) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	deploy := &appsv1.Deployment{}
	objs.one(t, "Deployment", "manager", deploy)
	if n := len(objs.ofKind("Deployment")); n != 1 {
		t.Errorf("config/default renders %d Deployments, want only the manager", n)
	}
	for i := range deploy.Spec.Template.Spec.Containers {
		if c := &deploy.Spec.Template.Spec.Containers[i]; c.Name == "manager" {
			return deploy, c
		}
	}
	t.Fatalf("Deployment %s has no container named manager", deploy.Name)
	return nil, nil
}

// selects reports whether selector matches the labels.
func selects(t *testing.T, selector *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	if selector == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		t.Fatalf("invalid selector %v: %v", selector, err)
	}
	return !s.Empty() && s.Matches(labels.Set(podLabels))
}

// containerPort returns the container's port with that name.
func containerPort(c *corev1.Container, name string) (corev1.ContainerPort, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p, true
		}
	}
	return corev1.ContainerPort{}, false
}

func TestManagerRunsWithLeaderElection(t *testing.T) {
	deploy, c := managerDeployment(t, renderDefault(t))
	// The image's entrypoint is the switchboard binary; the Deployment only picks the
	// subcommand and its flags.
	if len(c.Command) != 0 {
		t.Errorf("manager container overrides the image entrypoint with %v", c.Command)
	}
	if len(c.Args) == 0 || c.Args[0] != "manager" {
		t.Errorf("manager container args are %v, want the manager subcommand first", c.Args)
	}
	if !slices.Contains(c.Args, "--leader-elect") && !slices.Contains(c.Args, "--leader-elect=true") {
		t.Errorf("manager container args %v do not enable --leader-elect", c.Args)
	}
	if r := deploy.Spec.Replicas; r == nil || *r < 2 {
		t.Errorf("manager Deployment has %v replicas, want at least 2 (leader plus standby)", r)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if got := env["POD_NAMESPACE"].ValueFrom; got == nil || got.FieldRef == nil || got.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("POD_NAMESPACE is not the pod's namespace (the leader Lease and stdio NetworkPolicies use it): %+v", env["POD_NAMESPACE"])
	}
	if got := env["SWITCHBOARD_IMAGE"].Value; got != c.Image {
		t.Errorf("SWITCHBOARD_IMAGE is %q, the manager image %q: stdio pods would copy a different bridge", got, c.Image)
	}
}

func TestManagerIsHardened(t *testing.T) {
	objs := renderDefault(t)
	deploy, _ := managerDeployment(t, objs)
	pod := deploy.Spec.Template.Spec
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Error("manager pod does not set runAsNonRoot")
	}
	if pod.SecurityContext == nil || pod.SecurityContext.SeccompProfile == nil ||
		pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("manager pod does not use the RuntimeDefault seccomp profile")
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Error("manager pod shares a host namespace")
	}
	if pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Error("manager pod does not mount its ServiceAccount token, which it needs for the API server")
	}
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("container %s has no securityContext", c.Name)
			continue
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container %s allows privilege escalation", c.Name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("container %s is privileged", c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("container %s has a writable root filesystem", c.Name)
		}
		if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("container %s does not set runAsNonRoot", c.Name)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("container %s capabilities are %+v, want drop ALL and add none", c.Name, sc.Capabilities)
		}
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := c.Resources.Requests[res]; !ok || q.IsZero() {
				t.Errorf("container %s requests no %s", c.Name, res)
			}
			if q, ok := c.Resources.Limits[res]; !ok || q.IsZero() {
				t.Errorf("container %s has no %s limit", c.Name, res)
			}
		}
	}
}

func TestManagerProbesUseTheProbePort(t *testing.T) {
	_, c := managerDeployment(t, renderDefault(t))
	for name, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		want := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[name]
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("manager container has no HTTP %s probe", name)
			continue
		}
		if probe.HTTPGet.Path != want {
			t.Errorf("%s probe path is %q, want %q", name, probe.HTTPGet.Path, want)
		}
		if _, ok := containerPort(c, probe.HTTPGet.Port.String()); !ok {
			t.Errorf("%s probe targets port %q, which the manager container does not name", name, probe.HTTPGet.Port.String())
		}
	}
}

// TestContainerPortsAreWhatTheManagerListensOn checks each named container port against
// the flag that makes the manager listen there: a Service, probe or NetworkPolicy rule
// aimed at the name then reaches the server it means.
func TestContainerPortsAreWhatTheManagerListensOn(t *testing.T) {
	_, c := managerDeployment(t, renderDefault(t))
	flags := map[string]string{
		"metrics": "--metrics-bind-address",
		"probes":  "--health-probe-bind-address",
		"catalog": "--catalog-bind-address",
	}
	if len(c.Ports) != len(flags) {
		t.Errorf("manager container declares ports %+v, want exactly %v", c.Ports, slices.Sorted(maps.Keys(flags)))
	}
	for name, flag := range flags {
		port, ok := containerPort(c, name)
		if !ok {
			t.Errorf("manager container has no port named %s", name)
			continue
		}
		want := fmt.Sprintf("%s=:%d", flag, port.ContainerPort)
		if !slices.Contains(c.Args, want) {
			t.Errorf("port %s is %d, but the manager args %v do not contain %s", name, port.ContainerPort, c.Args, want)
		}
	}
}

func TestDisruptionBudgetKeepsOneManager(t *testing.T) {
	objs := renderDefault(t)
	deploy, _ := managerDeployment(t, objs)
	pdb := &policyv1.PodDisruptionBudget{}
	objs.one(t, "PodDisruptionBudget", "manager", pdb)
	if !selects(t, pdb.Spec.Selector, deploy.Spec.Template.Labels) {
		t.Errorf("PodDisruptionBudget selector %v does not select the manager pods %v", pdb.Spec.Selector, deploy.Spec.Template.Labels)
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 {
		t.Errorf("PodDisruptionBudget minAvailable is %v, want at least 1", pdb.Spec.MinAvailable)
	}
}

package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// fieldOwner is the field manager of the CRDs Start applies.
const fieldOwner = "switchboard-dev"

// readCRDs reads the CustomResourceDefinitions of the YAML and JSON files in dirs (not
// their subfolders), skipping other kinds, as envtest did. A folder that is missing or
// holds none is an error: the CRDs would be missing.
func readCRDs(dirs []string) ([]*unstructured.Unstructured, error) {
	var crds []*unstructured.Unstructured
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("reading the CRDs: %w", err)
		}
		found := 0
		for _, e := range entries {
			if e.IsDir() || !slices.Contains([]string{".yaml", ".yml", ".json"}, filepath.Ext(e.Name())) {
				continue
			}
			objects, err := readManifests(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, err
			}
			for _, obj := range objects {
				if obj.GroupVersionKind() == apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition") {
					crds = append(crds, obj)
					found++
				}
			}
		}
		if found == 0 {
			return nil, fmt.Errorf("no apiextensions.k8s.io/v1 CustomResourceDefinition in %s", dir)
		}
	}
	return crds, nil
}

// readManifests decodes every document of a YAML or JSON file.
func readManifests(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path) //nolint:gosec // a manifest of the CRD folder the caller chose
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var objects []*unstructured.Unstructured
	decoder := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var obj map[string]any
		if err := decoder.Decode(&obj); errors.Is(err, io.EOF) {
			return objects, nil
		} else if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		if len(obj) > 0 { // an empty document between two ---
			objects = append(objects, &unstructured.Unstructured{Object: obj})
		}
	}
}

// installCRDs server-side applies crds and waits until the API server serves each of
// them (Established).
func installCRDs(ctx context.Context, cfg *rest.Config, crds []*unstructured.Unstructured) error {
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(crd.DeepCopy()),
			client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying CustomResourceDefinition %s: %w", crd.GetName(), err)
		}
	}
	for _, crd := range crds {
		err := pollUntil(ctx, func(ctx context.Context) (bool, error) {
			var got apiextensionsv1.CustomResourceDefinition
			if err := c.Get(ctx, client.ObjectKey{Name: crd.GetName()}, &got); err != nil {
				return false, err
			}
			return established(&got), nil
		})
		if err != nil {
			return fmt.Errorf("waiting for CustomResourceDefinition %s to be Established: %w", crd.GetName(), err)
		}
	}
	return nil
}

// established says whether the API server serves a CRD's resources.
func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, cond := range crd.Status.Conditions {
		if cond.Type == apiextensionsv1.Established {
			return cond.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

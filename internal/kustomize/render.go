// Package kustomize renders the project's kustomizations (config/) into objects, as
// `kubectl apply -k` would. switchboard dev applies its samples with it; the tests check
// config/ with it.
package kustomize

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Render builds the kustomization in dir on fsys and returns its objects in
// kustomize's output order.
func Render(fsys filesys.FileSystem, dir string) ([]*unstructured.Unstructured, error) {
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", dir, err)
	}
	objects := make([]*unstructured.Unstructured, 0, resMap.Size())
	for _, res := range resMap.Resources() {
		// Through JSON, so numbers are the int64 and float64 the API machinery expects
		// (kustomize's own maps hold int, which DeepCopy rejects).
		data, err := res.MarshalJSON()
		if err != nil {
			return nil, err
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(data); err != nil {
			return nil, err
		}
		objects = append(objects, obj)
	}
	return objects, nil
}

// RenderDir renders the kustomization in dir on the local disk.
func RenderDir(dir string) ([]*unstructured.Unstructured, error) {
	return Render(filesys.MakeFsOnDisk(), dir)
}

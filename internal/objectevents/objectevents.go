// Package objectevents adapts a controller-runtime informer of one kind to two callbacks,
// for the components that keep a picture of API objects in memory (the catalogue's index,
// the gateway's servers and toolsets) without a reconciler.
//
// It must not import anything of Switchboard's.
package objectevents

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// Handler adapts an informer of T to two callbacks: put for an object that was added or
// changed (a resync that changed nothing is skipped), remove for one that was deleted,
// including one whose final state the informer missed.
func Handler[T metav1.Object](put, remove func(T)) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				put(o)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok := newObj.(T)
			if !ok {
				return
			}
			if old, ok := oldObj.(T); ok && old.GetResourceVersion() == o.GetResourceVersion() {
				return
			}
			put(o)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if o, ok := obj.(T); ok {
				remove(o)
			}
		},
	}
}

package catalog

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// ObjectEventHandler adapts an informer of T to two callbacks: put for an object that
// was added or changed (a resync that changed nothing is skipped), remove for one that
// was deleted, including one whose final state the informer missed. The catalogue and
// the gateway keep their pictures of MCPServers and MCPToolsets with it.
func ObjectEventHandler[T metav1.Object](put, remove func(T)) toolscache.ResourceEventHandler {
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

package connector_test

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
)

// The controller turns connector events into a controller-runtime channel source: each
// Event becomes a GenericEvent for an object that carries only the key's namespace and
// name, which is all EnqueueRequestForObject needs.
func ExamplePool_Events() {
	pool, err := connector.NewPool(connector.Options{})
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	events := make(chan event.TypedGenericEvent[*mcpv1alpha1.MCPServer])
	go func() {
		defer close(events)
		for ev := range pool.Events() {
			events <- event.TypedGenericEvent[*mcpv1alpha1.MCPServer]{Object: &mcpv1alpha1.MCPServer{
				ObjectMeta: metav1.ObjectMeta{Namespace: ev.Key.Namespace, Name: ev.Key.Name},
			}}
		}
	}()
	src := source.Channel(events, &handler.TypedEnqueueRequestForObject[*mcpv1alpha1.MCPServer]{})
	_ = src // builder.WatchesRawSource(src) in SetupWithManager

	// In Reconcile: hand the connector the resolved config, then read what it knows.
	key := connector.Key{Namespace: "team-a", Name: "github"}
	pool.Ensure(key, connector.Config{URL: "https://mcp.example.com/mcp"})
	if snap, ok := pool.Snapshot(key); ok {
		fmt.Println(snap.State, snap.Endpoint)
	}
}

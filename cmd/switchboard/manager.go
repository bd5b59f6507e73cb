package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// leaderElectionID names the Lease that manager replicas compete for.
const leaderElectionID = "switchboard.mcp.switchboard.dev"

// managerOptions are the manager subcommand's flags.
type managerOptions struct {
	metricsAddr      string
	probeAddr        string
	leaderElect      bool
	leaderElectionNS string
	zap              zap.Options
}

func (o *managerOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080",
		"Address the Prometheus metrics endpoint binds to; 0 disables it.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081",
		"Address the /healthz and /readyz endpoints bind to.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false,
		"Elect a leader among manager replicas so that exactly one reconciles at a time.")
	fs.StringVar(&o.leaderElectionNS, "leader-election-namespace", "",
		"Namespace of the leader election Lease; defaults to the manager's own namespace.")
	// --kubeconfig; without it the in-cluster config or $KUBECONFIG is used.
	config.RegisterFlags(fs)
	// Structured JSON logs unless --zap-devel asks for human-readable ones.
	o.zap.BindFlags(fs)
}

// newScheme returns the scheme of every kind the manager reads or writes.
func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := mcpv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, nil
}

// reconcilerSetups registers each controller with the manager: adding a controller is
// one line here.
var reconcilerSetups = []func(mgr ctrl.Manager) error{}

func runManager(args []string) int {
	var opts managerOptions
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	opts.bind(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts.zap)))
	log := ctrl.Log.WithName("manager")

	if err := startManager(opts); err != nil {
		log.Error(err, "Manager stopped with an error")
		return 1
	}
	log.Info("Manager stopped")
	return 0
}

// startManager builds the manager, registers every controller and runs until SIGTERM or
// SIGINT, then shuts down gracefully.
func startManager(opts managerOptions) error {
	scheme, err := newScheme()
	if err != nil {
		return fmt.Errorf("building scheme: %w", err)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: opts.metricsAddr},
		HealthProbeBindAddress:  opts.probeAddr,
		LeaderElection:          opts.leaderElect,
		LeaderElectionID:        leaderElectionID,
		LeaderElectionNamespace: opts.leaderElectionNS,
		// Hand the Lease over at once on a clean shutdown instead of making the next
		// leader wait for it to expire.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	for _, setup := range reconcilerSetups {
		if err := setup(mgr); err != nil {
			return fmt.Errorf("setting up controller: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding readiness check: %w", err)
	}
	ctrl.Log.WithName("manager").Info("Starting manager", "pid", os.Getpid())
	return mgr.Start(ctrl.SetupSignalHandler())
}

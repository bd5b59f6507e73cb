package devcluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/keyutil"
)

// ClusterName names the cluster, the context and nothing else in the kubeconfigs
// WriteKubeconfig writes.
const ClusterName = "switchboard-dev"

// Options say which binaries to run, where they keep their data and which CRDs to
// install.
type Options struct {
	// EtcdPath and APIServerPath are the etcd and kube-apiserver binaries.
	EtcdPath, APIServerPath string
	// Dir is a folder of the control plane's own for etcd's data, the certificates and
	// the keys. Start empties it first (a run killed outright leaves its data there)
	// and Stop removes it.
	Dir string
	// LogDir is where etcd.log and kube-apiserver.log are written, kept after Stop;
	// empty writes them into Dir.
	LogDir string
	// CRDDirs are folders whose CustomResourceDefinitions Start installs.
	CRDDirs []string
	// StartTimeout bounds the start of each process and the CRDs' installation; zero is
	// one minute. StopTimeout is how long each process has to stop on SIGTERM before it
	// is killed; zero is 20 seconds.
	StartTimeout, StopTimeout time.Duration
}

// User is a Kubernetes user a client certificate authenticates as.
type User struct {
	// Name is the user name (the certificate's common name).
	Name string
	// Groups are the user's groups (the certificate's organizations); system:masters
	// bypasses authorisation.
	Groups []string
}

// admin is the user of Config.
var admin = User{Name: "admin", Groups: []string{"system:masters"}}

// ControlPlane is a running etcd and kube-apiserver.
type ControlPlane struct {
	// Config connects to the API server as an administrator (group system:masters).
	Config *rest.Config

	opts      Options
	clientCA  *authority
	etcd      *process
	apiServer *process
	stopOnce  sync.Once
	stopErr   error
}

// startAttempts is how often Start picks new ports when a process finds one of its
// ports taken by another program since it was chosen.
const startAttempts = 3

// Start starts etcd and kube-apiserver on free loopback ports, waits until the API server
// is ready, installs the CRDs and waits until they are Established. On error it stops
// whatever it started. ctx bounds the waits; Stop must be called to stop a started
// control plane.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	if opts.StartTimeout == 0 {
		opts.StartTimeout = time.Minute
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 20 * time.Second
	}
	if opts.Dir == "" {
		return nil, errors.New("devcluster: no folder for the control plane's data")
	}
	if opts.LogDir == "" {
		opts.LogDir = opts.Dir
	}
	// Before anything starts: a missing CRD folder is a mistake to report at once.
	crds, err := readCRDs(opts.CRDDirs)
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(opts.Dir); err != nil {
		return nil, err
	}
	for _, dir := range []string{opts.Dir, opts.LogDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	cp := &ControlPlane{opts: opts}
	defer func() {
		if err != nil {
			err = errors.Join(err, cp.Stop())
		}
	}()

	files, err := cp.writeCredentials()
	if err != nil {
		return nil, err
	}
	etcdURL, err := cp.startEtcd(ctx)
	if err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx, etcdURL, files); err != nil {
		return nil, err
	}
	installCtx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	if err := installCRDs(installCtx, cp.Config, crds); err != nil {
		return nil, err
	}
	return cp, nil
}

// credentialFiles are the paths of what the API server reads at start.
type credentialFiles struct {
	servingCert, servingKey, clientCA, serviceAccountKey string
	// servingCA is the PEM certificate clients trust the API server with.
	servingCA []byte
}

// writeCredentials creates the serving CA and certificate, the client CA and the
// service-account signing key, and writes what the API server needs into Dir.
func (cp *ControlPlane) writeCredentials() (credentialFiles, error) {
	pki := filepath.Join(cp.opts.Dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return credentialFiles{}, err
	}
	files := credentialFiles{
		servingCert:       filepath.Join(pki, "apiserver.crt"),
		servingKey:        filepath.Join(pki, "apiserver.key"),
		clientCA:          filepath.Join(pki, "client-ca.crt"),
		serviceAccountKey: filepath.Join(pki, "service-account.key"),
	}
	servingCA, err := newAuthority("switchboard-dev-serving-ca")
	if err != nil {
		return files, err
	}
	if files.servingCA, err = servingCA.certPEM(); err != nil {
		return files, err
	}
	servingCert, servingKey, err := servingCA.servingCert()
	if err != nil {
		return files, err
	}
	if cp.clientCA, err = newAuthority("switchboard-dev-client-ca"); err != nil {
		return files, err
	}
	clientCA, err := cp.clientCA.certPEM()
	if err != nil {
		return files, err
	}
	// The API server signs service-account tokens with this key and checks them with it.
	serviceAccountKey, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return files, err
	}
	for path, data := range map[string][]byte{
		files.servingCert: servingCert, files.servingKey: servingKey,
		files.clientCA: clientCA, files.serviceAccountKey: serviceAccountKey,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return files, err
		}
	}
	return files, nil
}

// startEtcd starts etcd on free ports and waits until it is healthy; it returns its
// client URL.
func (cp *ControlPlane) startEtcd(ctx context.Context) (string, error) {
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			return "", err
		}
		clientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
		cp.etcd, err = startProcess("etcd", cp.opts.EtcdPath, []string{
			"--data-dir=" + filepath.Join(cp.opts.Dir, "etcd"),
			"--listen-client-urls=" + clientURL,
			"--advertise-client-urls=" + clientURL,
			"--listen-peer-urls=http://127.0.0.1:" + strconv.Itoa(ports[1]),
			// Nothing here outlives the session: no need to wait for the disk.
			"--unsafe-no-fsync=true",
		}, filepath.Join(cp.opts.LogDir, "etcd.log"))
		if err != nil {
			return "", err
		}
		err = cp.etcd.waitReady(ctx, cp.opts.StartTimeout, func(ctx context.Context) (bool, error) {
			return httpOK(ctx, http.DefaultClient, clientURL+"/health")
		})
		if err == nil {
			return clientURL, nil
		}
		if attempt == startAttempts || !cp.etcd.exitedOnPortInUse() {
			return "", fmt.Errorf("starting etcd: %w", err)
		}
	}
}

// startAPIServer starts kube-apiserver on a free port, with the flags envtest gave it,
// and waits until /readyz answers ok. It sets Config.
func (cp *ControlPlane) startAPIServer(ctx context.Context, etcdURL string, files credentialFiles) error {
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return err
		}
		host := "https://127.0.0.1:" + strconv.Itoa(ports[0])
		cp.apiServer, err = startProcess("kube-apiserver", cp.opts.APIServerPath, []string{
			"--etcd-servers=" + etcdURL,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(ports[0]),
			"--tls-cert-file=" + files.servingCert,
			"--tls-private-key-file=" + files.servingKey,
			// Users are who their client certificate says; RBAC authorises them.
			"--client-ca-file=" + files.clientCA,
			"--authorization-mode=RBAC",
			"--service-account-issuer=" + host + "/",
			"--service-account-key-file=" + files.serviceAccountKey,
			"--service-account-signing-key-file=" + files.serviceAccountKey,
			"--service-cluster-ip-range=10.0.0.0/24",
			"--allow-privileged=true",
			// No controller manager creates the default ServiceAccounts the plugin
			// would require of every pod.
			"--disable-admission-plugins=ServiceAccount",
		}, filepath.Join(cp.opts.LogDir, "kube-apiserver.log"))
		if err != nil {
			return err
		}
		base := &rest.Config{
			Host:            host,
			TLSClientConfig: rest.TLSClientConfig{CAData: files.servingCA},
			// No client-side throttling, as with envtest: the manager dev runs with this
			// config is the one busy client of a control plane of its own.
			QPS: 1000, Burst: 2000,
		}
		if cp.Config, err = cp.userConfig(base, admin); err != nil {
			return err
		}
		httpClient, err := rest.HTTPClientFor(cp.Config)
		if err != nil {
			return err
		}
		err = cp.apiServer.waitReady(ctx, cp.opts.StartTimeout, func(ctx context.Context) (bool, error) {
			return httpOK(ctx, httpClient, host+"/readyz")
		})
		httpClient.CloseIdleConnections()
		if err == nil {
			return nil
		}
		if attempt == startAttempts || !cp.apiServer.exitedOnPortInUse() {
			return fmt.Errorf("starting kube-apiserver: %w", err)
		}
	}
}

// userConfig returns base with a client certificate for user.
func (cp *ControlPlane) userConfig(base *rest.Config, user User) (*rest.Config, error) {
	certPEM, keyPEM, err := cp.clientCA.clientCert(user)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(base)
	cfg.CertData, cfg.KeyData = certPEM, keyPEM
	return cfg, nil
}

// WriteKubeconfig writes to path a kubeconfig that connects to the API server as user,
// readable by its owner only.
func (cp *ControlPlane) WriteKubeconfig(path string, user User) error {
	cfg, err := cp.userConfig(cp.Config, user)
	if err != nil {
		return err
	}
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters[ClusterName] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: cfg.CAData,
	}
	kubeconfig.AuthInfos[user.Name] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
	}
	kubeconfig.Contexts[ClusterName] = &clientcmdapi.Context{Cluster: ClusterName, AuthInfo: user.Name}
	kubeconfig.CurrentContext = ClusterName
	data, err := clientcmd.Write(*kubeconfig)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// Stop stops kube-apiserver, then etcd, each with SIGTERM and, should it not stop in
// time, SIGKILL, and removes Dir. It returns the same result when called again.
func (cp *ControlPlane) Stop() error {
	cp.stopOnce.Do(func() {
		var errs []error
		for _, p := range []*process{cp.apiServer, cp.etcd} {
			if p != nil {
				errs = append(errs, p.stop(cp.opts.StopTimeout))
			}
		}
		errs = append(errs, os.RemoveAll(cp.opts.Dir))
		cp.stopErr = errors.Join(errs...)
	})
	return cp.stopErr
}

// httpOK says whether a GET of url answers 200.
func httpOK(ctx context.Context, c *http.Client, url string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return false, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return false, err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return true, nil
}

// pollUntil calls condition every 100 ms until it reports true, or until ctx ends: it
// then returns ctx's cause with the last error condition returned.
func pollUntil(ctx context.Context, condition func(context.Context) (bool, error)) error {
	var lastErr error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ok, err := condition(ctx)
		if ctx.Err() == nil { // not the error of a call cut short by ctx's end
			lastErr = err
		}
		return ok, nil
	})
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil {
		err = cause
	}
	if lastErr != nil {
		return fmt.Errorf("%w (last: %w)", err, lastErr)
	}
	return err
}

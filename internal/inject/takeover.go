package inject

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyproc"
)

// Taking over another project's shutdown manager (Config.Takeover, annotation shutdown-manager.io/takeover).
//
// Contour, Envoy Gateway and MARIN3R put their own manager into the Envoy pods they render: a container beside
// Envoy and preStop hooks that call it. Injecting ours next to theirs would drain one Envoy twice, so a pod that
// runs one of them is refused (ErrPeerManager) unless takeover is asked for. Takeover removes their container and
// Envoy's hook that calls it, records both in the status annotation (Takeover) so that Uninject puts them back
// where they were, field for field, and points our drain at the admin address their Envoy really uses. Every
// other container, volume (Contour's /admin emptyDir holds Envoy's admin socket and stays), probe and the grace
// period (only ever raised, as always) are left as they are.
//
// The shapes recognised, as the peers render them (read from their sources):
//   - Contour (cmd/contour/shutdownmanager.go, examples/render): a container running `contour envoy
//     shutdown-manager` (command and args together, the binary by its base name: /bin/contour) with the preStop
//     exec `contour envoy shutdown`; Envoy's preStop httpGet /shutdown on port 8090. Envoy's admin API is the unix
//     socket `contour bootstrap --admin-address` writes into the bootstrap (default /admin/admin.sock).
//   - Envoy Gateway (internal/cmd/envoy/shutdown_manager.go, internal/infrastructure/kubernetes/proxy): a container
//     running `envoy-gateway envoy shutdown-manager` with the preStop exec `envoy-gateway envoy shutdown`; Envoy's
//     preStop httpGet /shutdown/ready on port 19002; the ready file /tmp/shutdown-ready lives in that container's
//     own filesystem and goes with it. Envoy's admin address is in its inline bootstrap (--config-yaml; 127.0.0.1:19000).
//   - MARIN3R (pkg/envoy/container/generator.go): a container named envoy-shtdn-mgr running `shutdown-manager
//     --port N` with the preStop httpGet /drain on N; Envoy's preStop httpGet /shutdown on N. Envoy's admin
//     address is the init container's `init-manager --admin-bind-address HOST:PORT`.
//
// Envoy's preStop exec `contour envoy shutdown` or `envoy-gateway envoy shutdown` is recognised too.

// Peer names another project's shutdown manager.
type Peer string

const (
	PeerContour      Peer = "contour"
	PeerEnvoyGateway Peer = "envoy-gateway"
	PeerMarin3r      Peer = "marin3r"
)

// describe names the peer's manager for people.
func (p Peer) describe() string {
	switch p {
	case PeerContour:
		return "Contour's shutdown manager"
	case PeerEnvoyGateway:
		return "Envoy Gateway's shutdown manager"
	case PeerMarin3r:
		return "MARIN3R's shutdown manager"
	}
	return string(p)
}

// The peers' defaults, where the pod does not say otherwise.
const (
	contourPort        = 8090                // Contour's shutdown-manager listens on :8090 (hard-coded)
	contourAdminSocket = "/admin/admin.sock" // `contour bootstrap --admin-address`'s default
	envoyGatewayPort   = 19002               // Envoy Gateway's shutdown-manager server
	marin3rContainer   = "envoy-shtdn-mgr"   // MARIN3R's shutdown manager container
)

// ErrPeerManager is returned (wrapped, in one line naming the peer's manager and how to take it over) by Inject
// for a pod that runs another project's shutdown manager when takeover was not asked for; the pod is left unchanged.
var ErrPeerManager = errors.New("the pod runs another shutdown manager")

// Takeover is what Inject removed to take over a peer's manager, recorded in the status annotation: Uninject
// puts each container back at its index and Envoy's preStop hook back in place.
type Takeover struct {
	Peer           Peer                     `json:"peer"`
	InitContainers []RemovedContainer       `json:"initContainers,omitempty"`
	Containers     []RemovedContainer       `json:"containers,omitempty"`
	EnvoyPreStop   *corev1.LifecycleHandler `json:"envoyPreStop,omitempty"`
}

// RemovedContainer is a container and the index it had in its list.
type RemovedContainer struct {
	Index     int              `json:"index"`
	Container corev1.Container `json:"container"`
}

// peerFound is what findPeer saw: the peer, which containers are its manager, whether Envoy's preStop hook calls
// it, and the evidence in words for the refusal.
type peerFound struct {
	peer           Peer
	initContainers []int
	containers     []int
	envoyHook      bool
	evidence       []string
}

// findPeer looks for a peer's manager in the pod; envoy is the index of Envoy's container. ok is false when
// there is none. Two different peers in one pod are an error.
func findPeer(spec *corev1.PodSpec, envoy int) (found peerFound, ok bool, err error) {
	note := func(p Peer, what string) error {
		if found.peer != "" && found.peer != p {
			return fmt.Errorf("the pod runs both %s and %s: take it over by hand", found.peer.describe(), p.describe())
		}
		found.peer = p
		found.evidence = append(found.evidence, what)
		return nil
	}
	marin3rPort := int32(0)
	for _, list := range []struct {
		init bool
		cs   []corev1.Container
	}{{true, spec.InitContainers}, {false, spec.Containers}} {
		for i, c := range list.cs {
			if !list.init && i == envoy {
				continue
			}
			p, port := managerOf(c)
			if p == "" {
				continue
			}
			if p == PeerMarin3r {
				marin3rPort = port
			}
			if err := note(p, fmt.Sprintf("container %q: %s", c.Name, strings.Join(words(c), " "))); err != nil {
				return peerFound{}, false, err
			}
			if list.init {
				found.initContainers = append(found.initContainers, i)
			} else {
				found.containers = append(found.containers, i)
			}
		}
	}
	if l := spec.Containers[envoy].Lifecycle; l != nil && l.PreStop != nil {
		if p := hookOf(l.PreStop, marin3rPort); p != "" {
			if err := note(p, fmt.Sprintf("Envoy's preStop %s", describeHandler(l.PreStop))); err != nil {
				return peerFound{}, false, err
			}
			found.envoyHook = true
		}
	}
	return found, found.peer != "", nil
}

// words is a container's command line as written: command, then args.
func words(c corev1.Container) []string { return slices.Concat(c.Command, c.Args) }

// managerOf tells whether container c runs a peer's manager, and MARIN3R's port.
func managerOf(c corev1.Container) (Peer, int32) {
	w := words(c)
	switch {
	case peerCommand(w, "shutdown-manager") != "":
		return peerCommand(w, "shutdown-manager"), 0
	case c.Name == marin3rContainer && len(w) > 0 && w[0] == "shutdown-manager":
		port := int32(contourPort) // MARIN3R's default --port
		if v, ok := flagValue(w, "--port"); ok {
			if n, err := strconv.ParseInt(v, 10, 32); err == nil {
				port = int32(n)
			}
		}
		return PeerMarin3r, port
	}
	return "", 0
}

// peerCommand: `contour envoy <sub>` or `envoy-gateway envoy <sub>` (the binary by its base name).
func peerCommand(w []string, sub string) Peer {
	if len(w) < 3 || w[1] != "envoy" || w[2] != sub {
		return ""
	}
	switch path.Base(w[0]) {
	case "contour":
		return PeerContour
	case "envoy-gateway":
		return PeerEnvoyGateway
	}
	return ""
}

// hookOf tells whether Envoy's preStop hook h calls a peer's manager (marin3rPort: MARIN3R's port when its
// container is in the pod, else 0).
func hookOf(h *corev1.LifecycleHandler, marin3rPort int32) Peer {
	switch {
	case h.Exec != nil:
		return peerCommand(h.Exec.Command, "shutdown")
	case h.HTTPGet != nil:
		port := h.HTTPGet.Port.IntValue()
		switch {
		case marin3rPort != 0 && h.HTTPGet.Path == "/shutdown" && port == int(marin3rPort):
			return PeerMarin3r
		case h.HTTPGet.Path == "/shutdown" && port == contourPort:
			return PeerContour
		case h.HTTPGet.Path == "/shutdown/ready" && port == envoyGatewayPort:
			return PeerEnvoyGateway
		}
	}
	return ""
}

// flagValue finds --name=value or --name value among words.
func flagValue(w []string, name string) (string, bool) {
	for i, a := range w {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(w) {
			return w[i+1], true
		}
	}
	return "", false
}

// takeOver removes a peer's manager from spec when set.Takeover (recording it in set.takeover, and setting the
// admin address the peer's Envoy uses unless one was given), or refuses the pod with ErrPeerManager. A pod
// without a peer's manager, or without an Envoy container (inject reports that), is left alone.
func takeOver(spec *corev1.PodSpec, set *settings) error {
	ref, err := findEnvoy(spec, set.EnvoyContainer)
	if err != nil || ref.init {
		return nil // the peers' pods run Envoy among the containers, never as a native sidecar
	}
	envoy := ref.index
	found, ok, err := findPeer(spec, envoy)
	if err != nil || !ok {
		return err
	}
	if !set.Takeover {
		return fmt.Errorf("%w: %s (%s): replace it with ours with --takeover or annotation %s: \"true\" (uninject gives it back)",
			ErrPeerManager, found.peer.describe(), strings.Join(found.evidence, "; "), AnnotationTakeover)
	}
	if set.AdminAddress == "" {
		addr, err := peerAdmin(spec, envoy, found.peer)
		if err != nil {
			return fmt.Errorf("taking over %s: %w", found.peer.describe(), err)
		}
		set.AdminAddress = addr
	}
	t := &Takeover{Peer: found.peer}
	if found.envoyHook {
		c := &spec.Containers[envoy]
		t.EnvoyPreStop = c.Lifecycle.PreStop.DeepCopy()
		c.Lifecycle.PreStop = nil
		if *c.Lifecycle == (corev1.Lifecycle{}) {
			c.Lifecycle = nil
		}
	}
	t.InitContainers, spec.InitContainers = remove(spec.InitContainers, found.initContainers)
	t.Containers, spec.Containers = remove(spec.Containers, found.containers)
	set.takeover = t
	return nil
}

// remove takes the containers at the (ascending) indexes out of cs.
func remove(cs []corev1.Container, indexes []int) ([]RemovedContainer, []corev1.Container) {
	if len(indexes) == 0 {
		return nil, cs
	}
	var removed []RemovedContainer
	var kept []corev1.Container
	for i, c := range cs {
		if slices.Contains(indexes, i) {
			removed = append(removed, RemovedContainer{Index: i, Container: *c.DeepCopy()})
			continue
		}
		kept = append(kept, c)
	}
	return removed, kept
}

// peerAdmin is the admin address the peer's Envoy uses, read from the pod as Envoy reads its command line
// (envoyadmin.ParseCommandLine): its inline bootstrap (--config-yaml) when that names one, else the bootstrap
// file (-c) that the peer's init container writes there (Contour's `contour bootstrap PATH --admin-address`,
// MARIN3R's `init-manager --config-file PATH --admin-bind-address`). Where the pod does not show which admin
// Envoy uses (a command line Envoy would refuse, a bootstrap from a file nothing in the pod writes, a value
// kubelet expands from a variable, Envoy run through a shell), it refuses in one line naming the container and
// --admin-address: never a default that might be wrong.
func peerAdmin(spec *corev1.PodSpec, envoy int, peer Peer) (string, error) {
	c := spec.Containers[envoy]
	addr, err := envoyAdmin(spec, c, peer)
	if err != nil {
		return "", fmt.Errorf("container %q: %w: give the admin address its Envoy uses with --admin-address or annotation %s", c.Name, err, AnnotationAdminAddress)
	}
	return addr, nil
}

func envoyAdmin(spec *corev1.PodSpec, c corev1.Container, peer Peer) (string, error) {
	args, err := envoyArguments(c)
	if err != nil {
		return "", err
	}
	cl, err := envoyadmin.ParseCommandLine(args)
	if err != nil {
		return "", err
	}
	// kubelet expands $(NAME) in command and args. In the file's name that leaves the file unknown; in the
	// inline bootstrap it matters only in the admin address, which must then be an IP address and a port as
	// written (AdminFromBootstrap refuses "$(NAME)" as either).
	if strings.Contains(cl.ConfigPath, "$(") {
		return "", fmt.Errorf("envoy's -c %s refers to a variable that kubelet expands", cl.ConfigPath)
	}
	if cl.ConfigYAML != "" {
		addr, found, err := envoyadmin.AdminFromBootstrap([]byte(cl.ConfigYAML))
		if err != nil {
			return "", fmt.Errorf("envoy's --config-yaml: %w", err)
		}
		if found {
			return addr.String(), nil
		}
	}
	if cl.ConfigPath == "" {
		return "", errors.New("envoy's command line names no bootstrap with an admin address")
	}
	switch peer {
	case PeerContour:
		for _, ic := range spec.InitContainers {
			if w := words(ic); len(w) >= 3 && path.Base(w[0]) == "contour" && w[1] == "bootstrap" && contourBootstrapPath(w[2:]) == cl.ConfigPath {
				socket := contourAdminSocket
				if v, ok := flagValue(w, "--admin-address"); ok {
					socket = v
				}
				addr, err := envoyadmin.ParseAddress("unix://" + socket)
				if err != nil {
					return "", fmt.Errorf("contour bootstrap --admin-address: %w", err)
				}
				return addr.String(), nil
			}
		}
	case PeerMarin3r:
		for _, ic := range spec.InitContainers {
			if w := words(ic); len(w) > 0 && w[0] == "init-manager" {
				if v, ok := flagValue(w, "--config-file"); !ok || v != cl.ConfigPath {
					continue
				}
				if v, ok := flagValue(w, "--admin-bind-address"); ok {
					return loopback(v)
				}
				return "http://127.0.0.1:9901", nil // init-manager's default 0.0.0.0:9901
			}
		}
	}
	return "", fmt.Errorf("envoy's bootstrap %s is a file that no container of the pod writes", cl.ConfigPath)
}

// envoyArguments are the arguments Envoy's container gives Envoy: after the command when that runs envoy;
// the args alone when the container sets no command (Envoy's images run envoy with args that begin with a
// flag) or when they begin with envoy.
func envoyArguments(c corev1.Container) ([]string, error) {
	switch {
	case len(c.Command) > 0:
		if !envoyproc.IsEnvoy("", c.Command) {
			return nil, fmt.Errorf("its command %q is not envoy", c.Command[0])
		}
		return slices.Concat(c.Command[1:], c.Args), nil
	case len(c.Args) == 0:
		return nil, errors.New("it sets neither command nor args: Envoy runs the image's own bootstrap")
	case strings.HasPrefix(c.Args[0], "-"):
		return c.Args, nil
	case envoyproc.IsEnvoy("", c.Args):
		return c.Args[1:], nil
	}
	return nil, fmt.Errorf("its args begin with %q, neither envoy nor a flag", c.Args[0])
}

// contourBootstrapPath is the file `contour bootstrap` writes: its first argument that is no flag (Contour
// writes its flags as --name=value).
func contourBootstrapPath(args []string) string {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return ""
}

// loopback turns a bind address (HOST:PORT, HOST an IP, possibly the wildcard) into the address to reach it.
func loopback(bind string) (string, error) {
	ap, err := netip.ParseAddrPort(bind)
	if err != nil {
		return "", fmt.Errorf("init-manager --admin-bind-address %q: %w", bind, err)
	}
	ip := ap.Addr()
	if ip.IsUnspecified() {
		ip = netip.MustParseAddr("127.0.0.1")
		if ap.Addr().Is6() {
			ip = netip.IPv6Loopback()
		}
	}
	return "http://" + netip.AddrPortFrom(ip, ap.Port()).String(), nil
}

// restoreTakeover puts back what takeOver removed: the containers at their indexes, Envoy's preStop hook.
func restoreTakeover(spec *corev1.PodSpec, envoyName string, t *Takeover) error {
	var err error
	if spec.InitContainers, err = insert(spec.InitContainers, t.InitContainers); err != nil {
		return err
	}
	if spec.Containers, err = insert(spec.Containers, t.Containers); err != nil {
		return err
	}
	if t.EnvoyPreStop == nil {
		return nil
	}
	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == envoyName })
	if i < 0 {
		return fmt.Errorf("annotation %s: Envoy's container %q is gone: cannot restore its preStop hook", AnnotationStatus, envoyName)
	}
	c := &spec.Containers[i]
	if c.Lifecycle == nil {
		c.Lifecycle = &corev1.Lifecycle{}
	}
	if c.Lifecycle.PreStop != nil {
		return fmt.Errorf("annotation %s: container %q has a preStop hook again (%s): cannot restore %s's", AnnotationStatus, envoyName, describeHandler(c.Lifecycle.PreStop), t.Peer)
	}
	c.Lifecycle.PreStop = t.EnvoyPreStop.DeepCopy()
	return nil
}

// insert puts the removed containers back at their indexes (ascending).
func insert(cs []corev1.Container, removed []RemovedContainer) ([]corev1.Container, error) {
	for _, r := range removed {
		if hasContainer(cs, r.Container.Name) {
			return nil, fmt.Errorf("annotation %s: the pod has a container named %q again: cannot restore the one taken over", AnnotationStatus, r.Container.Name)
		}
		i := min(max(r.Index, 0), len(cs))
		cs = slices.Insert(cs, i, *r.Container.DeepCopy())
	}
	return cs, nil
}

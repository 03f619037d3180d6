// Package podenv names the environment variables that tell the manager which Pod it runs in. `shutdown-manager
// inject` (internal/inject) sets them from the downward API in every container that runs the manager: Envoy's
// container in hook and agent modes and with the sidecar's exec hook, and the sidecar. The manager reads them to
// record its Kubernetes Events on that Pod (internal/events).
//
// They are declared here, in a package of their own that imports nothing, so that the drain side of the binary
// (events) and the mutation (inject) agree on them without one importing the other: inject brings the Kubernetes
// API types, which the drain side does not need.
package podenv

const (
	Name      = "SHUTDOWN_MANAGER_POD_NAME"      // fieldRef metadata.name
	Namespace = "SHUTDOWN_MANAGER_POD_NAMESPACE" // fieldRef metadata.namespace
	// UID: fieldRef metadata.uid. An Event's regarding.uid: `kubectl describe pod` lists a pod's Events by
	// involvedObject.uid (and name, namespace, kind), so an Event without it is not shown there.
	UID = "SHUTDOWN_MANAGER_POD_UID"
	// ServiceAccountDir: a directory holding a ServiceAccount's token, ca.crt and namespace, read instead of the
	// default /var/run/secrets/kubernetes.io/serviceaccount. Inject sets it where it mounts a token of the
	// manager's own (a pod that turns automountServiceAccountToken off).
	ServiceAccountDir = "SHUTDOWN_MANAGER_SERVICE_ACCOUNT_DIR"
)

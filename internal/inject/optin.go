package inject

// Who is injected, declared once for every injector: the webhook (internal/webhook) and the policy generator
// (internal/policy) select on these and import them. The chart and deploy/ cannot import Go: test/chart's
// TestWebhookObjects checks the chart's selectors against these constants, and deploy/'s injected manifests and
// policy are inject's and the policy generator's own output (internal/cli's TestDeployExamples and
// TestDeployPolicy check they are up to date).
const (
	// LabelInject with the value InjectEnabled on a namespace or on a pod opts the pod in. On a pod, the value
	// InjectFalse or InjectDisabled opts it out, like AnnotationInject: InjectFalse (Istio's
	// sidecar.istio.io/inject convention). It is the same key as AnnotationInject, on the labels.
	LabelInject = Prefix + "inject"

	// The values of AnnotationInject and LabelInject.
	InjectTrue     = "true"     // annotation: the pod asks for the manager itself
	InjectFalse    = "false"    // annotation or label: opted out (Inject returns ErrOptedOut for the annotation)
	InjectEnabled  = "enabled"  // label: opted in (the selectors' value)
	InjectDisabled = "disabled" // label: opted out

	// LabelName with the value OwnName marks the shutdown manager's own objects (the chart's pods, the policy
	// and its bindings): their pods are never injected, since a webhook that injected its own replicas could
	// not start again once they all crashed.
	LabelName = "app.kubernetes.io/name"
	OwnName   = "shutdown-manager"
)

{{/*
The name every object of the chart starts with: <release>-shutdown-manager, or the release name alone when it
already says shutdown-manager; fullnameOverride replaces it. 63 characters at most (a DNS label).
*/}}
{{- define "shutdown-manager.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains "shutdown-manager" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-shutdown-manager" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
Labels of every object. app.kubernetes.io/name is always shutdown-manager (no nameOverride): the webhook's
objectSelector excludes pods with that label, so the chart's own pods are never sent to the webhook.
*/}}
{{- define "shutdown-manager.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "shutdown-manager.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "shutdown-manager.selectorLabels" -}}
app.kubernetes.io/name: shutdown-manager
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
The webhook image: repository@digest when a digest is set, else repository:tag, the tag defaulting to appVersion.
A packaged chart's appVersion is its release (make release sets it), so it defaults to the image that release
published. The chart as it sits in the repository has appVersion dev, which no registry serves: with neither
image.tag nor image.digest it fails rather than install a webhook in ImagePullBackOff that, with failurePolicy
Ignore, lets every pod through uninjected.
*/}}
{{- define "shutdown-manager.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else if .Values.image.tag -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- else if eq .Chart.AppVersion "dev" -}}
{{- fail "this chart is the repository's (appVersion dev), whose image no registry serves: set image.tag (or image.digest), e.g. image.tag=v0.1.0 for the release ghcr.io/envoy-shutdown-manager/shutdown-manager:v0.1.0; a packaged release defaults to its own image" -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository .Chart.AppVersion -}}
{{- end -}}
{{- end -}}

{{/*
The cluster image (the full CLI) the webhook's Deployment runs: clusterImage's digest, else its tag, else image.tag,
else the chart's appVersion (the release), as the pod image.
*/}}
{{- define "shutdown-manager.clusterImage" -}}
{{- $_ := include "shutdown-manager.image" . -}}{{/* the pod image's refusal first: setting image.tag answers both */}}
{{- $c := .Values.clusterImage -}}
{{- if $c.digest -}}
{{- printf "%s@%s" $c.repository $c.digest -}}
{{- else if $c.tag -}}
{{- printf "%s:%s" $c.repository $c.tag -}}
{{- else if .Values.image.tag -}}
{{- printf "%s:%s" $c.repository .Values.image.tag -}}
{{- else if eq .Chart.AppVersion "dev" -}}
{{- fail "this chart is the repository's (appVersion dev), whose cluster image no registry serves: set clusterImage.tag (or clusterImage.digest, or image.tag for both images), e.g. image.tag=v0.1.0 for the release ghcr.io/envoy-shutdown-manager/shutdown-manager-cluster:v0.1.0" -}}
{{- else -}}
{{- printf "%s:%s" $c.repository .Chart.AppVersion -}}
{{- end -}}
{{- end -}}

{{/*
"true" when an image reference names no registry host: its first path component has no dot or colon and is not
localhost (the rule of containerd and Docker), so nodes pull it from Docker Hub (docker.io/library/NAME for a
single name).
*/}}
{{- define "shutdown-manager.noRegistry" -}}
{{- $first := first (splitList "/" .) -}}
{{- if or (not (contains "/" .)) (not (or (contains "." $first) (contains ":" $first) (eq $first "localhost"))) -}}
true
{{- end -}}
{{- end -}}

{{/* The Service's DNS name, which the serving certificate must hold. */}}
{{- define "shutdown-manager.serviceHost" -}}
{{- printf "%s.%s.svc" (include "shutdown-manager.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* The Secret holding the webhook's serving certificate (tls.crt, tls.key, ca.crt). */}}
{{- define "shutdown-manager.tlsSecretName" -}}
{{- if eq .Values.certificates.source "secret" -}}
{{- required "certificates.secretName is required when certificates.source is secret" .Values.certificates.secretName -}}
{{- else -}}
{{- printf "%s-tls" (include "shutdown-manager.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/*
The injection settings as `shutdown-manager inject` flags, one YAML list item per flag. Settings left empty are
not passed, so that inject's own defaults (and the drain's) apply, exactly as on the command line.
*/}}
{{- define "shutdown-manager.injectArgs" -}}
{{- $i := .Values.inject -}}
- {{ printf "--image=%v" ($i.image | default (include "shutdown-manager.image" .)) | quote }}
{{- with $i.imagePullPolicy }}
- {{ printf "--image-pull-policy=%v" . | quote }}
{{- end }}
- {{ printf "--mode=%v" $i.mode | quote }}
- {{ printf "--binary-from=%v" $i.binaryFrom | quote }}
- {{ printf "--hook=%v" $i.hook | quote }}
- {{ printf "--sidecar-kind=%v" $i.sidecarKind | quote }}
{{- with $i.envoyContainer }}
- {{ printf "--envoy-container=%v" . | quote }}
{{- end }}
- {{ printf "--envoy-command=%v" (join " " $i.envoyCommand) | quote }}
{{- with $i.adminAddress }}
- {{ printf "--admin-address=%v" . | quote }}
{{- end }}
- {{ printf "--port=%v" (int64 $i.port) | quote }}
- {{ printf "--metrics-port=%v" (int64 $i.metricsPort) | quote }}
{{- with $i.tokenSecret }}
- {{ printf "--token-secret=%v" . | quote }}
{{- end }}
{{- if $i.replaceHooks }}
- --replace-hooks
{{- end }}
{{- if $i.takeover }}
- --takeover
{{- end }}
{{- if not $i.apiToken }}
- --api-token=false
{{- end }}
{{- with $i.drainDelay }}
- {{ printf "--drain-delay=%v" . | quote }}
{{- end }}
{{- with $i.minDrainDuration }}
- {{ printf "--min-drain-duration=%v" . | quote }}
{{- end }}
{{- with $i.quietPeriod }}
- {{ printf "--quiet-period=%v" . | quote }}
{{- end }}
{{- with $i.drainTimeout }}
- {{ printf "--drain-timeout=%v" . | quote }}
{{- end }}
{{- with $i.deregistrationDelay }}
- {{ printf "--deregistration-delay=%v" . | quote }}
{{- end }}
{{- if not (kindIs "invalid" $i.minOpenConnections) }}
- {{ printf "--min-open-connections=%v" (int64 $i.minOpenConnections) | quote }}
{{- end }}
{{- with $i.count }}
- {{ printf "--count=%v" . | quote }}
{{- end }}
{{- range $i.listenerExclude }}
- {{ printf "--listener-exclude=%v" . | quote }}
{{- end }}
{{- range $i.listenerInclude }}
- {{ printf "--listener-include=%v" . | quote }}
{{- end }}
{{- with $i.drainListeners }}
- {{ printf "--drain-listeners=%v" . | quote }}
{{- end }}
{{- with $i.checkInterval }}
- {{ printf "--check-interval=%v" . | quote }}
{{- end }}
{{- with $i.envoyGoneAfter }}
- {{ printf "--envoy-gone-after=%v" . | quote }}
{{- end }}
{{- with $i.adminTimeout }}
- {{ printf "--admin-timeout=%v" . | quote }}
{{- end }}
{{- with $i.drainLogLevel }}
- {{ printf "--drain-log-level=%v" . | quote }}
{{- end }}
{{- with $i.drainLogFormat }}
- {{ printf "--drain-log-format=%v" . | quote }}
{{- end }}
{{- end -}}

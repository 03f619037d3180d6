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

{{/* The webhook image: repository@digest when a digest is set, else repository:tag (tag defaults to appVersion). */}}
{{- define "shutdown-manager.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
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
- --image={{ $i.image | default (include "shutdown-manager.image" .) }}
{{- with $i.imagePullPolicy }}
- --image-pull-policy={{ . }}
{{- end }}
- --mode={{ $i.mode }}
- --binary-from={{ $i.binaryFrom }}
- --hook={{ $i.hook }}
- --sidecar-kind={{ $i.sidecarKind }}
{{- with $i.envoyContainer }}
- --envoy-container={{ . }}
{{- end }}
- --envoy-command={{ join " " $i.envoyCommand }}
{{- with $i.adminAddress }}
- --admin-address={{ . }}
{{- end }}
- --port={{ $i.port }}
- --metrics-port={{ $i.metricsPort }}
{{- if $i.replaceHooks }}
- --replace-hooks
{{- end }}
{{- with $i.drainDelay }}
- --drain-delay={{ . }}
{{- end }}
{{- with $i.minDrainDuration }}
- --min-drain-duration={{ . }}
{{- end }}
{{- with $i.drainTimeout }}
- --drain-timeout={{ . }}
{{- end }}
{{- if ne $i.minOpenConnections nil }}
- --min-open-connections={{ $i.minOpenConnections }}
{{- end }}
{{- with $i.count }}
- --count={{ . }}
{{- end }}
{{- range $i.listenerExclude }}
- --listener-exclude={{ . }}
{{- end }}
{{- end -}}

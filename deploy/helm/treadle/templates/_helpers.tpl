{{- define "treadle.fullname" -}}{{ printf "%s-treadle" .Release.Name | trunc 50 | trimSuffix "-" }}{{- end -}}
{{- define "treadle.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}
{{- define "treadle.secret" -}}{{ .Values.secrets.existingSecret | default (include "treadle.fullname" .) }}{{- end -}}
{{- define "treadle.labels" -}}
app.kubernetes.io/name: treadle
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: treadle
{{- end -}}
{{- define "treadle.selector" -}}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}
{{/* The settings every worker shares: brokers (every node), Redis with its password, logs, traces. */}}
{{- define "treadle.env" -}}
{{- $full := include "treadle.fullname" . -}}
- {name: TREADLE_NATS_URL, value: {{ include "treadle.natsUrls" . | quote }}}
- {name: TREADLE_NATS_USER, value: treadle}
- name: TREADLE_NATS_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ include "treadle.secret" . }}, key: TREADLE_NATS_PASSWORD}}
- name: REDIS_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ include "treadle.secret" . }}, key: REDIS_PASSWORD, optional: true}}
- name: TREADLE_REDIS_URL
  value: {{ printf "redis://:$(REDIS_PASSWORD)@%s" (ternary (printf "%s-redis:6379/0" $full) .Values.redis.externalUrl .Values.redis.enabled) | quote }}
- {name: TREADLE_STREAM_REPLICAS, value: {{ .Values.nats.replicas | quote }}}
- {name: TREADLE_PROVIDER_HOST_HOST_EXPIRY_SECONDS, value: "20"}
- {name: TREADLE_LOG_FORMAT, value: {{ .Values.logFormat | quote }}}
- {name: TREADLE_LOG_LEVEL, value: {{ .Values.logLevel | quote }}}
{{- with .Values.tracing }}
{{- if .otlpEndpoint }}
- {name: OTEL_EXPORTER_OTLP_ENDPOINT, value: {{ .otlpEndpoint | quote }}}
- {name: OTEL_EXPORTER_OTLP_PROTOCOL, value: {{ .protocol | quote }}}
- {name: OTEL_TRACES_SAMPLER, value: {{ .sampler | quote }}}
{{- with .samplerArg }}
- {name: OTEL_TRACES_SAMPLER_ARG, value: {{ . | quote }}}
{{- end }}
{{- with .resourceAttributes }}
- {name: OTEL_RESOURCE_ATTRIBUTES, value: {{ . | quote }}}
{{- end }}
{{- with .headersSecretKey }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom: {secretKeyRef: {name: {{ include "treadle.secret" $ }}, key: {{ . }}}}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
{{- define "treadle.natsUrls" -}}
{{- $full := include "treadle.fullname" . -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.nats.replicas) -}}
{{- $urls = append $urls (printf "nats://%s-nats-%d.%s-nats:4222" $full $i $full) -}}
{{- end -}}
{{ join "," $urls }}
{{- end -}}
{{- define "treadle.podSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
fsGroupChangePolicy: OnRootMismatch
seccompProfile: {type: RuntimeDefault}
{{- end -}}
{{- define "treadle.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end -}}
{{/* /healthz, /readyz and /metrics of a worker on its metrics port */}}
{{- define "treadle.probes" -}}
ports: [{name: metrics, containerPort: {{ .port }}}]
startupProbe: {httpGet: {path: /readyz, port: metrics}, periodSeconds: 2, failureThreshold: 60}
readinessProbe: {httpGet: {path: /readyz, port: metrics}, periodSeconds: 5}
livenessProbe: {httpGet: {path: /healthz, port: metrics}, periodSeconds: 10, failureThreshold: 3}
{{- end -}}
{{- define "treadle.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "treadle.fullname" .) -}}
{{- end -}}
{{/* What every pod spec of the release shares: its ServiceAccount, without the API token (no worker calls the
Kubernetes API), and its spread over nodes and zones. Called with (dict "root" $ "component" name). */}}
{{- define "treadle.podIdentity" -}}
serviceAccountName: {{ include "treadle.serviceAccountName" .root }}
automountServiceAccountToken: false
{{- end -}}
{{- define "treadle.spread" -}}
topologySpreadConstraints:
{{- range $key := .root.Values.spread.topologyKeys }}
  - maxSkew: 1
    topologyKey: {{ $key }}
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels: {{- include "treadle.selector" $ | nindent 8 }}
{{- end }}
{{- end -}}
{{/* the pods of one or more components of this release, as a NetworkPolicyPeer */}}
{{- define "treadle.peer" -}}
{podSelector: {matchLabels: {app.kubernetes.io/instance: {{ .release }}}, matchExpressions: [{key: app.kubernetes.io/component, operator: In, values: {{ .components | toJson }}}]}}
{{- end -}}

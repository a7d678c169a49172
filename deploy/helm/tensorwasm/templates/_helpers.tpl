{{/* The release's resource name. */}}
{{- define "tensorwasm.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the pods. */}}
{{- define "tensorwasm.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels that select the server's pods. */}}
{{- define "tensorwasm.serverSelectorLabels" -}}
{{ include "tensorwasm.selectorLabels" . }}
app.kubernetes.io/component: server
{{- end -}}

{{/* Labels of every object. */}}
{{- define "tensorwasm.labels" -}}
{{ include "tensorwasm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The Secret that holds serve.json. */}}
{{- define "tensorwasm.secretName" -}}
{{- .Values.existingSecret | default (include "tensorwasm.fullname" .) -}}
{{- end -}}

{{/*
The server's configuration as JSON (docs/serve.md): the server's limits,
where it listens, and the tenants. JSON, not TOML: Helm holds numbers as
floats, which toToml would print as 1.0 where the server wants integers.
*/}}
{{- define "tensorwasm.config" -}}
{{- $listen := printf "0.0.0.0:%d" (int .Values.service.port) -}}
{{- $config := merge (dict "listen" $listen "tenant" .Values.tenants) .Values.server -}}
{{- $config | toJson -}}
{{- end -}}

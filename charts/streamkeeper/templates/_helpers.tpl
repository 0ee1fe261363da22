{{/* The release's full name, at most 63 characters (a DNS label). */}}
{{- define "streamkeeper.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selector labels of the operator pods: fixed once a Deployment exists, so no version here. */}}
{{- define "streamkeeper.selectorLabels" -}}
app.kubernetes.io/name: streamkeeper-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "streamkeeper.labels" -}}
{{ include "streamkeeper.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: streamkeeper
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "streamkeeper.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "streamkeeper.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "streamkeeper.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Lease the replicas elect a leader through (in the release namespace). */}}
{{- define "streamkeeper.leaseName" -}}
{{- include "streamkeeper.fullname" . -}}
{{- end -}}

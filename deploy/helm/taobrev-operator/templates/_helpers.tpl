{{/* Labels every object carries; the selector labels are deploy/'s, so a kustomize install can be adopted. */}}
{{- define "taobrev.labels" -}}
app.kubernetes.io/name: taobrev-operator
app.kubernetes.io/part-of: taobrev-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "taobrev.selectorLabels" -}}
app.kubernetes.io/name: taobrev-operator
app.kubernetes.io/component: controller
{{- end }}

{{/* The operator's ServiceAccount as an RBAC subject. */}}
{{- define "taobrev.subject" -}}
- kind: ServiceAccount
  name: taobrev-operator
  namespace: {{ .Release.Namespace }}
{{- end }}

{{- define "taobrev.image" -}}
{{- $i := .Values.image -}}
{{- $i.repository }}{{ with $i.tag }}:{{ . }}{{ end }}{{ with $i.digest }}@{{ . }}{{ end }}
{{- end }}

{{/*
Memory limit (= request) from the sizing formula of docs/settings.md, in MiB rounded up to 256:
109 (operator idle + ssh-agent) + (create + delete lanes + 1 shared `brev ls`) x 40 + 12 x N.
*/}}
{{- define "taobrev.memory" -}}
{{- $create := int (get .Values.settings "TAOBREV_LANE_CREATE" | default 16) -}}
{{- $delete := int (get .Values.settings "TAOBREV_LANE_DELETE" | default 16) -}}
{{- $mib := add 109 (mul (add $create $delete 1) 40) (mul 12 (int .Values.sizing.concurrentJobs)) -}}
{{- $rounded := mul (div (add $mib 255) 256) 256 -}}
{{- if eq (mod $rounded 1024) 0 }}{{ div $rounded 1024 }}Gi{{ else }}{{ $rounded }}Mi{{ end -}}
{{- end }}

{{- define "taobrev.resources" -}}
{{- $r := deepCopy .Values.resources -}}
{{- $requests := $r.requests | default dict -}}
{{- $limits := $r.limits | default dict -}}
{{- if not (or (hasKey $requests "memory") (hasKey $limits "memory")) -}}
{{- $memory := include "taobrev.memory" . -}}
{{- $_ := set $requests "memory" $memory -}}
{{- $_ := set $limits "memory" $memory -}}
{{- end -}}
{{- $_ := set $r "requests" $requests -}}
{{- $_ := set $r "limits" $limits -}}
{{- toYaml $r -}}
{{- end }}

{{/* Settings the chart derives from other values: refused in .Values.settings, naming the value to use. */}}
{{- define "taobrev.checkValues" -}}
{{- $reserved := dict
  "TAOBREV_NAMESPACES" "namespacedMode.enabled with jobNamespaces"
  "TAOBREV_LEADER_ELECTION" "leaderElection.enabled"
  "TAOBREV_BREV_CREDENTIALS_SECRET" "brevCredentials.secretName"
  "TAOBREV_METRICS_PORT" "ports.metrics"
  "TAOBREV_LOG_API_PORT" "ports.logApi (or logApi.enabled=false)"
  "TAOBREV_LIVENESS_ENDPOINT" "ports.health"
  "TAOBREV_LOG_API_CERT_DIR" "logApi.certSecret"
  "TAOBREV_LEADER_LEASE_NAME" "nothing: the Lease Role grants the name taobrev-operator"
  "TAOBREV_LOG_API_SERVICE" "nothing: the Service is taobrev-log-api"
  "TAOBREV_OPERATOR_NAMESPACE" "nothing: it is the release namespace"
  "TAOBREV_KUBE_TOKEN_PATH" "nothing: the Pod spec sets it"
  "TAOBREV_KUBE_CA_PATH" "nothing: the Pod spec sets it"
  "TAOBREV_KUBE_SERVER" "nothing: the Pod spec sets it"
-}}
{{- range $name, $use := $reserved -}}
{{- if hasKey $.Values.settings $name -}}
{{- fail (printf "settings.%s: the chart sets it; use %s" $name $use) -}}
{{- end -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) -}}
{{- fail (printf "replicaCount=%d with leaderElection.enabled=false: every replica would act on every job; set replicaCount=1 or enable leader election" (int .Values.replicaCount)) -}}
{{- end -}}
{{- if has .Release.Namespace .Values.jobNamespaces -}}
{{- fail (printf "jobNamespaces: %q is the release (operator) namespace: do not run jobs there (its Secrets include the operator's Brev credentials); pick another namespace" .Release.Namespace) -}}
{{- end -}}
{{- if and .Values.namespacedMode.enabled (not .Values.jobNamespaces) -}}
{{- fail "namespacedMode.enabled=true needs jobNamespaces: the namespaces the operator watches (and reads Secrets in)" -}}
{{- end -}}
{{- end }}

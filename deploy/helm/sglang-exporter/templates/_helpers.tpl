{{/* Names. */}}
{{- define "sglang-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sglang-exporter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "sglang-exporter.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "sglang-exporter.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "sglang-exporter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "sglang-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sglang-exporter
{{- end }}

{{/* Labels of the objects Prometheus Operator selects: kube-prometheus-stack wants `release: <its release>`. */}}
{{- define "sglang-exporter.monitoringLabels" -}}
{{ include "sglang-exporter.labels" . }}
{{- with .Values.monitoring.release }}
release: {{ . | quote }}
{{- end }}
{{- with .Values.monitoring.labels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The pods of workload.create. */}}
{{- define "sglang-exporter.workloadLabels" -}}
app.kubernetes.io/name: sglang
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sglang-exporter.podSelector" -}}
{{- if .Values.sglang.podSelector }}
{{- toYaml .Values.sglang.podSelector }}
{{- else if .Values.workload.create }}
matchLabels:
  {{- include "sglang-exporter.workloadLabels" . | nindent 2 }}
{{- else }}
{{- fail "sglang.podSelector: give the labels of your SGLang pods (or set workload.create)" }}
{{- end }}
{{- end }}

{{- define "sglang-exporter.image" -}}
{{- printf "%s:%s" .Values.exporter.image.repository (default .Chart.AppVersion .Values.exporter.image.tag) }}
{{- end }}

{{/* The exporter's config.yaml: what the pod wiring fixes, under the user's exporter.config. */}}
{{- define "sglang-exporter.config" -}}
{{- $c := dict "listen" (printf ":%v" .Values.exporter.port) "sglang_url" (printf "http://127.0.0.1:%v" .Values.sglang.port) }}
{{- if .Values.exporter.readLogs }}
{{- $_ := set $c "log_files" (list .Values.handoff.logFile) }}
{{- $_ := set $c "positions_file" "/var/lib/sglang-exporter/positions.json" }}
{{- end }}
{{- toYaml (mergeOverwrite $c (deepCopy .Values.exporter.config)) }}
{{- end }}

{{/*
A LeaderWorkerSet worker's config: its log only. The HTTP server, the server_args and ready lines are the
leader's, so the start-up stall (no ready line after server_args) cannot be judged on a worker.
*/}}
{{- define "sglang-exporter.workerConfig" -}}
{{- $c := dict "listen" (printf ":%v" .Values.exporter.port) "log_files" (list .Values.handoff.logFile) "positions_file" "/var/lib/sglang-exporter/positions.json" }}
{{- $c = mergeOverwrite $c (omit (deepCopy .Values.exporter.config) "sglang_url") }}
{{- $signals := default dict $c.signals }}
{{- $_ := set $signals "startup_stalled" (dict "enabled" false) }}
{{- $_ := set $c "signals" $signals }}
{{- toYaml $c }}
{{- end }}

{{/* The native sidecar: the same container in NOTES.txt's snippet and in workload.create's pods. */}}
{{- define "sglang-exporter.sidecar" -}}
- name: sglang-exporter
  image: {{ include "sglang-exporter.image" . }}
  imagePullPolicy: {{ .Values.exporter.image.pullPolicy }}
  restartPolicy: Always
  args: ["serve", "--config", "/etc/sglang-exporter/config.yaml"]
  ports:
    - name: metrics
      containerPort: {{ .Values.exporter.port }}
      protocol: TCP
  livenessProbe:
    httpGet:
      path: /healthz
      port: metrics
    initialDelaySeconds: 30
    periodSeconds: 20
    timeoutSeconds: 5
    failureThreshold: 3
  resources:
    {{- toYaml .Values.exporter.resources | nindent 4 }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    privileged: false
    capabilities:
      drop: ["ALL"]
    seccompProfile:
      type: RuntimeDefault
  volumeMounts:
    {{- if .Values.exporter.readLogs }}
    - name: logs
      mountPath: /logs
      readOnly: true
    {{- end }}
    - name: exporter-config
      mountPath: /etc/sglang-exporter
      readOnly: true
    - name: exporter-tmp
      mountPath: /tmp
    {{- if .Values.exporter.readLogs }}
    - name: exporter-state
      mountPath: /var/lib/sglang-exporter
    {{- end }}
{{- end }}

{{/* The pod's volumes for the sidecar; (dict "root" $ "config" <ConfigMap name>). */}}
{{- define "sglang-exporter.volumes" -}}
{{- $v := .root.Values }}
{{- if $v.exporter.readLogs }}
- name: logs
  emptyDir:
    sizeLimit: {{ $v.handoff.logVolumeSizeLimit }}
- name: handoff
  configMap:
    name: {{ include "sglang-exporter.fullname" .root }}-handoff
    defaultMode: 0444
{{- end }}
- name: exporter-config
  configMap:
    name: {{ .config }}
- name: exporter-tmp
  emptyDir:
    sizeLimit: 16Mi
{{- if $v.exporter.readLogs }}
- name: exporter-state
  emptyDir:
    sizeLimit: 1Mi
{{- end }}
{{- end }}

{{/* What SGLang's command is prefixed with: the hand-off wrapper, then `--`. */}}
{{- define "sglang-exporter.handoffCommand" -}}
- python3
- /opt/sglang-exporter/handoff.py
- --file={{ .Values.handoff.logFile }}
- --max-bytes={{ .Values.handoff.maxBytes }}
- --backups={{ .Values.handoff.backups }}
- --
{{- end }}

{{- define "sglang-exporter.sglangMounts" -}}
- name: logs
  mountPath: /logs
- name: handoff
  mountPath: /opt/sglang-exporter
  readOnly: true
{{- end }}

{{/* The SGLang container's fields after its command and args (workload.create). */}}
{{- define "sglang-exporter.sglangContainer" -}}
env:
  - name: PYTHONUNBUFFERED    # keep stdout lines in order with stderr lines
    value: "1"
  - name: HF_HOME
    value: /models
ports:
  - name: http
    containerPort: {{ .Values.sglang.port }}
    protocol: TCP
startupProbe:                 # download + load + CUDA graph capture: up to 30 minutes
  httpGet:
    path: /health
    port: http
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 180
readinessProbe:
  httpGet:
    path: /health
    port: http
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
livenessProbe:
  httpGet:
    path: /health
    port: http
  periodSeconds: 30
  timeoutSeconds: 10
  failureThreshold: 5
resources:
  {{- include "sglang-exporter.sglangResources" . | nindent 2 }}
volumeMounts:
  {{- include "sglang-exporter.sglangMounts" . | nindent 2 }}
  - name: dshm
    mountPath: /dev/shm
  - name: models
    mountPath: /models
{{- end }}

{{- define "sglang-exporter.sglangResources" -}}
{{- $r := deepCopy .Values.workload.resources }}
{{- $_ := set $r "requests" (merge (dict "nvidia.com/gpu" .Values.workload.gpus) (default dict $r.requests)) }}
{{- $_ := set $r "limits" (merge (dict "nvidia.com/gpu" .Values.workload.gpus) (default dict $r.limits)) }}
{{- toYaml $r }}
{{- end }}

{{- define "sglang-exporter.sglangVolumes" -}}
- name: dshm                  # NCCL / torch shared memory between ranks
  emptyDir:
    medium: Memory
    sizeLimit: 16Gi
- name: models                # replace with a PersistentVolumeClaim to keep weights across restarts
  emptyDir: {}
{{- end }}

{{/* Names: <release>-gpuwatch unless the release name already contains the chart name. */}}
{{- define "gpuwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpuwatch.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "gpuwatch.component" (dict "root" $ "component" "exporter") -> <fullname>-exporter */}}
{{- define "gpuwatch.componentName" -}}
{{- printf "%s-%s" (include "gpuwatch.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpuwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: gpuwatch
{{ include "gpuwatch.selectorLabels" . }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gpuwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuwatch.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* image: "gpuwatch.image" (dict "root" $ "image" .Values.exporter.image) */}}
{{- define "gpuwatch.image" -}}
{{- $repo := .image.repository | default .root.Values.image.repository -}}
{{- $tag := .image.tag | default .root.Values.image.tag | default .root.Chart.AppVersion -}}
image: {{ printf "%s:%s" $repo $tag | quote }}
imagePullPolicy: {{ .image.pullPolicy | default .root.Values.image.pullPolicy }}
{{- end -}}

{{- define "gpuwatch.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Restricted container security context for everything but the exporter. */}}
{{- define "gpuwatch.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
{{- end -}}

{{- define "gpuwatch.claimName" -}}
{{- .Values.persistence.existingClaim | default (include "gpuwatch.componentName" (dict "root" . "component" "data")) -}}
{{- end -}}

{{/* The shared DuckDB volume plus a writable /tmp (the root filesystem is read-only). */}}
{{- define "gpuwatch.dataVolumes" -}}
- name: data
{{- if .Values.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ include "gpuwatch.claimName" . }}
{{- else }}
  emptyDir: {}
{{- end }}
- name: tmp
  emptyDir: {}
{{- end -}}

{{- define "gpuwatch.dataMounts" -}}
- name: data
  mountPath: /data
{{- if .readOnly }}
  readOnly: true
{{- end }}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* HOME on the writable /tmp: Streamlit, DuckDB extensions and matplotlib-style caches write there. */}}
{{- define "gpuwatch.commonEnv" -}}
- name: HOME
  value: /tmp
- name: TZ
  value: UTC
{{- end -}}

{{/*
A ReadWriteOnce volume can be mounted by pods on one node only: pods other than the app follow
the app (required pod affinity), so every reader and the writer land together.
*/}}
{{- define "gpuwatch.dataAffinity" -}}
{{- if and .Values.persistence.enabled .Values.app.enabled (has "ReadWriteOnce" .Values.persistence.accessModes) }}
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "gpuwatch.selectorLabels" (dict "root" . "component" "app") | nindent 12 }}
{{- end }}
{{- end -}}

{{- define "gpuwatch.db" -}}/data/gpuwatch.duckdb{{- end -}}

{{- define "gpuwatch.prometheusSource" -}}
{{- if .Values.analyzer.from -}}
{{- .Values.analyzer.from -}}
{{- else -}}
{{- /* gpuwatch ingest reads prometheus://host:port (plain HTTP) and https:// URLs as they are */ -}}
{{- if hasPrefix "http://" .Values.prometheus.url -}}
{{- printf "prometheus://%s" (.Values.prometheus.url | trimPrefix "http://" | trimSuffix "/") -}}
{{- else -}}
{{- .Values.prometheus.url | trimSuffix "/" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The reclaim controller's namespaced rules (ClusterRole, or a Role per reclaim.rbac.namespaces
entry): get/list for a dry run; patch, eviction and Events only with reclaim.apply. Exactly the
calls gpuwatch/reclaim makes: tests/test_helm_reclaim_rbac.py compares them with the API log. */}}
{{- define "gpuwatch.reclaimRules" -}}
{{- $write := .apply -}}
- apiGroups: [""]
  resources: [pods]
  {{- /* a dry run lists pods; only the re-check before a write reads one by name */}}
  verbs: [{{ if $write }}get, {{ end }}list{{ if $write }}, patch{{ end }}]
- apiGroups: [apps]
  resources: [replicasets]
  verbs: [get]
- apiGroups: [apps]
  resources: [deployments, statefulsets]
  verbs: [get{{ if $write }}, patch{{ end }}]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get{{ if $write }}, patch{{ end }}]
- apiGroups: [kubeflow.org]
  resources: [notebooks]
  verbs: [get{{ if $write }}, patch{{ end }}]
- apiGroups: [ray.io]
  resources: [rayclusters]
  verbs: [get]
{{- if $write }}
- apiGroups: [""]
  resources: [pods/eviction]
  verbs: [create]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}
{{- with .rbac.extraRules }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* A NetworkPolicy selecting one component's pods: (dict "ctx" $ctx "types" (list ...)
"ingress" rules "egress" rules). A listed type with no rules denies that direction. */}}
{{- define "gpuwatch.networkPolicy" }}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "gpuwatch.componentName" .ctx }}
  namespace: {{ .ctx.root.Release.Namespace }}
  labels:
    {{- include "gpuwatch.labels" .ctx | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "gpuwatch.selectorLabels" .ctx | nindent 6 }}
  policyTypes: {{ toJson .types }}
  {{- if has "Ingress" .types }}
  ingress: {{ toJson (.ingress | default list) }}
  {{- end }}
  {{- if has "Egress" .types }}
  egress: {{ toJson (.egress | default list) }}
  {{- end }}
{{- end }}

{{/*
The first install decision (exporter.mode), as one word: "gpuwatch" (gpuwatch's exporter DaemonSet
replaces dcgm-exporter) or "cluster" (use the cluster's dcgm-exporter: gpuwatch deploys no
exporter and ingests what it serves through Prometheus). exporter.enabled=false: no exporter.
auto asks the cluster (gpuwatch.clusterDcgmExporter) and refuses to guess when it cannot see it.
*/}}
{{- define "gpuwatch.exporterMode" -}}
{{- $e := .Values.exporter -}}
{{- if not $e.enabled -}}
cluster
{{- else if ne $e.mode "auto" -}}
{{- $e.mode -}}
{{- else -}}
{{- $found := include "gpuwatch.clusterDcgmExporter" . -}}
{{- if eq $found "?" -}}
{{- fail "exporter.mode=auto cannot see the cluster (helm template, Argo CD, --dry-run=client): set exporter.mode=cluster to use the cluster's dcgm-exporter (the GPU Operator's), or exporter.mode=gpuwatch to deploy gpuwatch's exporter in its place (README \"Install on Kubernetes\")" -}}
{{- else if $found -}}
cluster
{{- else -}}
gpuwatch
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The dcgm-exporter the cluster already runs, in words ("" = none; "?" = the cluster cannot be seen).
Helm's lookup answers only during install/upgrade against a cluster; under `helm template` and
--dry-run=client it returns nothing, which is told apart by kube-system being absent. Looked for:
the GPU Operator's ClusterPolicy (nvidia.com/v1) with spec.dcgmExporter.enabled not false (the
operator's default is on), and any DaemonSet labelled app or app.kubernetes.io/name *dcgm-exporter*
(the operator's nvidia-dcgm-exporter, dcgm-exporter's own chart) that is not gpuwatch's.
*/}}
{{- define "gpuwatch.clusterDcgmExporter" -}}
{{- $found := list -}}
{{- /* the CRD first: a lookup of a kind the cluster does not serve fails the install */ -}}
{{- if lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" "clusterpolicies.nvidia.com" -}}
{{- range $policy := (lookup "nvidia.com/v1" "ClusterPolicy" "" "").items | default list -}}
{{- if dig "spec" "dcgmExporter" "enabled" true $policy -}}
{{- $found = append $found (printf "the GPU Operator's ClusterPolicy %s (spec.dcgmExporter.enabled)" $policy.metadata.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $ds := (lookup "apps/v1" "DaemonSet" "" "").items | default list -}}
{{- $labels := $ds.metadata.labels | default dict -}}
{{- if and (ne (get $labels "app.kubernetes.io/part-of") "gpuwatch") (regexMatch "(?i)dcgm-exporter" (printf "%s %s" (get $labels "app") (get $labels "app.kubernetes.io/name"))) -}}
{{- $found = append $found (printf "DaemonSet %s/%s" $ds.metadata.namespace $ds.metadata.name) -}}
{{- end -}}
{{- end -}}
{{- if $found -}}
{{- join ", " $found -}}
{{- else if not (lookup "v1" "Namespace" "" "kube-system") -}}
?
{{- end -}}
{{- end -}}

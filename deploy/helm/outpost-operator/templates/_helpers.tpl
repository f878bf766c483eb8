{{/*
The chart's names and labels, and the checks a render fails on.
*/}}

{{/* outpost-operator.name: the chart's name, or nameOverride. */}}
{{- define "outpost-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
outpost-operator.fullname: the name of the release's objects: fullnameOverride,
else the release name when it already holds the chart's name, else
<release>-<chart>; 63 characters at most (a DNS label).
*/}}
{{- define "outpost-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* outpost-operator.chart: chart name and version, for the helm.sh/chart label. */}}
{{- define "outpost-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* outpost-operator.selectorLabels: the labels the Deployment selects its pods by (never change them: a selector is immutable). */}}
{{- define "outpost-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "outpost-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* outpost-operator.labels: the labels of every object of the release. */}}
{{- define "outpost-operator.labels" -}}
helm.sh/chart: {{ include "outpost-operator.chart" . }}
{{ include "outpost-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: outpost
{{- end }}

{{/* outpost-operator.serviceAccountName: the ServiceAccount the operator runs as. */}}
{{- define "outpost-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "outpost-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false: the ServiceAccount the operator runs as" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* outpost-operator.image: the operator's image, repository:tag or repository@digest; the tag defaults to the chart's appVersion. */}}
{{- define "outpost-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* outpost-operator.workerImage: the image of a session's pod when its pool names none (--worker-image). */}}
{{- define "outpost-operator.workerImage" -}}
{{- $w := .Values.operator.workerImage }}
{{- if $w.digest }}
{{- printf "%s@%s" $w.repository $w.digest }}
{{- else }}
{{- printf "%s:%s" $w.repository (default .Chart.AppVersion $w.tag) }}
{{- end }}
{{- end }}

{{/*
outpost-operator.watchNamespaces: the namespaces the operator watches, one
per line; none means every namespace.
*/}}
{{- define "outpost-operator.watchNamespaces" -}}
{{- range (.Values.operator.watchNamespaces | uniq) }}
{{ . }}
{{- end }}
{{- end }}

{{/*
outpost-operator.origin: a URL's origin as the operator compares it:
scheme://host[:port], lower case, without the scheme's default port. Fails
the render on a URL that is not http(s) or has no host. Called with
(list "the value's name" URL).
*/}}
{{- define "outpost-operator.origin" -}}
{{- $what := index . 0 }}
{{- $raw := index . 1 }}
{{- $u := urlParse $raw }}
{{- $scheme := lower $u.scheme }}
{{- if not (has $scheme (list "http" "https")) }}
{{- fail (printf "%s %q must be an http:// or https:// URL" $what $raw) }}
{{- end }}
{{- if $u.userinfo }}
{{- fail (printf "%s %q must not hold a user name or password" $what $raw) }}
{{- end }}
{{- $host := lower $u.host }}
{{- if not $host }}
{{- fail (printf "%s %q has no host" $what $raw) }}
{{- end }}
{{- if and (eq $scheme "https") (hasSuffix ":443" $host) }}
{{- $host = trimSuffix ":443" $host }}
{{- else if and (eq $scheme "http") (hasSuffix ":80" $host) }}
{{- $host = trimSuffix ":80" $host }}
{{- end }}
{{- printf "%s://%s" $scheme $host }}
{{- end }}

{{/*
outpost-operator.apiUrlAllowed: "true" when the origin (list origin) is
allowed by operator.allowedApiUrls (an exact origin, or
https://*.example.com: any host below example.com), or, when that list is
empty, equals operator.defaultApiUrl's: the rule the operator applies
(--allowed-api-url, --default-api-url).
*/}}
{{- define "outpost-operator.apiUrlAllowed" -}}
{{- $ctx := index . 0 }}
{{- $origin := index . 1 }}
{{- $allowed := $ctx.Values.operator.allowedApiUrls }}
{{- if not $allowed }}
{{- if $ctx.Values.operator.defaultApiUrl }}
{{- $allowed = list $ctx.Values.operator.defaultApiUrl }}
{{- end }}
{{- end }}
{{- $ok := false }}
{{- range $allowed }}
{{- $entry := include "outpost-operator.origin" (list "operator.allowedApiUrls entry" .) }}
{{- if eq $entry $origin }}
{{- $ok = true }}
{{- else if contains "://*." $entry }}
{{- $parts := splitn "://*." 2 $entry }}
{{- $scheme := $parts._0 }}
{{- $suffix := printf ".%s" $parts._1 }}
{{- $rest := trimPrefix (printf "%s://" $scheme) $origin }}
{{- if and (hasPrefix (printf "%s://" $scheme) $origin) (hasSuffix $suffix $rest) (gt (len $rest) (len $suffix)) (not (contains "*" $rest)) }}
{{- $ok = true }}
{{- end }}
{{- end }}
{{- end }}
{{- $ok }}
{{- end }}

{{/*
outpost-operator.poolRules: what the operator needs where pools live: read
its pools and write their status and finalizer; make, watch and delete the
sessions' Pods and PersistentVolumeClaims; write the per-session Secrets and
read the pools' token Secrets by name — never list or watch Secrets, so the
operator holds no cache of them; record events.
*/}}
{{- define "outpost-operator.poolRules" -}}
- apiGroups: ["outpost.dev"]
  resources: ["outpostpools"]
  verbs: ["get", "list", "watch", "update", "patch"]
- apiGroups: ["outpost.dev"]
  resources: ["outpostpools/status"]
  verbs: ["get", "update", "patch"]
- apiGroups: ["outpost.dev"]
  resources: ["outpostpools/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods", "persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "update", "patch", "delete"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch", "update"]
{{- end }}

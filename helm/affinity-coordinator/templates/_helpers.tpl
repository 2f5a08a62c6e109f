{{/*
Names and labels shared by every template.
*/}}

{{- define "affinity.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: the release name, plus the chart name unless the release name already contains it.
*/}}
{{- define "affinity.fullname" -}}
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

{{- define "affinity.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels: stable for the life of the release (a Deployment selector is immutable).
*/}}
{{- define "affinity.selectorLabels" -}}
app.kubernetes.io/name: {{ include "affinity.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: coordinator
{{- end }}

{{- define "affinity.labels" -}}
helm.sh/chart: {{ include "affinity.chart" . }}
{{ include "affinity.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/part-of: affinity
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "affinity.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "affinity.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "affinity.processorServiceAccountName" -}}
{{- default (printf "%s-processor" (include "affinity.fullname" .)) .Values.processorRbac.serviceAccountName | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The container's resources: `resources` from values merged over these defaults, so that a null or
partial `resources` (or `limits: null`) never leaves the container without limits.
*/}}
{{- define "affinity.resources" -}}
{{- $defaults := dict "requests" (dict "cpu" "100m" "memory" "128Mi") "limits" (dict "cpu" "1" "memory" "256Mi") }}
{{- $given := .Values.resources | default dict }}
{{- $resources := dict }}
{{- range $part, $values := $defaults }}
{{- $merged := deepCopy $values }}
{{- range $key, $value := (get $given $part | default dict) }}
{{- if not (kindIs "invalid" $value) }}
{{- $_ := set $merged $key $value }}
{{- end }}
{{- end }}
{{- $_ := set $resources $part $merged }}
{{- end }}
{{- toYaml $resources }}
{{- end }}

{{/*
What `checksum/secret` hashes: the Secret's name, the connect string (not a secret: the logs show
it) and zookeeper.credentialsRevision. Never the credentials: a hash of a short password in the
pod template can be brute-forced. Bump credentialsRevision to roll the pods after changing them.
*/}}
{{- define "affinity.secretChecksum" -}}
{{- $connect := ternary "" .Values.zookeeper.connect (not (empty .Values.zookeeper.existingSecret)) }}
{{- printf "%s\n%s\n%v" (include "affinity.zookeeperSecretName" .) $connect .Values.zookeeper.credentialsRevision | sha256sum }}
{{- end }}

{{- define "affinity.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
The Secret holding the ZooKeeper connect string and credentials.
*/}}
{{- define "affinity.zookeeperSecretName" -}}
{{- .Values.zookeeper.existingSecret | default (printf "%s-zookeeper" (include "affinity.fullname" .)) }}
{{- end }}

{{- define "affinity.zookeeperTlsDir" -}}/etc/affinity-tls/zookeeper{{- end }}

{{/*
The job configuration (job.yaml): `config` from values, plus the TLS file paths when ZooKeeper
TLS is on. The connect string and credentials are not here: they come from the Secret as env.
*/}}
{{- define "affinity.jobConfig" -}}
{{- $config := deepCopy .Values.config }}
{{- if .Values.zookeeper.tls.enabled }}
{{- $dir := include "affinity.zookeeperTlsDir" . }}
{{- $zk := $config.zookeeper | default dict }}
{{- $_ := set $zk "use_ssl" true }}
{{- $_ := set $zk "verify_certs" .Values.zookeeper.tls.verifyCerts }}
{{- $_ := set $zk "ca" (printf "%s/%s" $dir .Values.zookeeper.tls.caKey) }}
{{- if .Values.zookeeper.tls.certKey }}
{{- $_ := set $zk "certfile" (printf "%s/%s" $dir .Values.zookeeper.tls.certKey) }}
{{- end }}
{{- if .Values.zookeeper.tls.keyKey }}
{{- $_ := set $zk "keyfile" (printf "%s/%s" $dir .Values.zookeeper.tls.keyKey) }}
{{- end }}
{{- $_ := set $config "zookeeper" $zk }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/*
Checks the schema cannot express; each failure names the value to fix.
*/}}
{{- define "affinity.validate" -}}
{{- if and (not .Values.zookeeper.existingSecret) (not .Values.zookeeper.connect) }}
{{- fail "zookeeper.connect is empty: set it (host:port[,host:port][/chroot]) or set zookeeper.existingSecret" }}
{{- end }}
{{- if and .Values.zookeeper.tls.enabled (not .Values.zookeeper.tls.existingSecret) }}
{{- fail "zookeeper.tls.enabled is true but zookeeper.tls.existingSecret is empty: name the Secret holding the CA (and client) certificate" }}
{{- end }}
{{- if and .Values.zookeeper.tls.certKey (not .Values.zookeeper.tls.keyKey) }}
{{- fail "zookeeper.tls.certKey is set but zookeeper.tls.keyKey is empty: a client certificate needs its key" }}
{{- end }}
{{- range .Values.extraEnv }}
{{- if and (has (upper .name) (list "AFFINITY_ZK_AUTH" "AFFINITY_ZOOKEEPER__AUTH" "AFFINITY_ZOOKEEPER")) (hasKey . "value") }}
{{- fail (printf "extraEnv: %s has a literal value: ZooKeeper credentials must not be written into the pod spec; set zookeeper.auth (the chart puts it in a Secret) or zookeeper.existingSecret and zookeeper.authKey" .name) }}
{{- end }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable)) }}
{{- fail "podDisruptionBudget: set either minAvailable or maxUnavailable, not both (set the other to null)" }}
{{- end }}
{{- end }}

{{/*
The Spark job's names (spark.*): its pods' labels, and the driver's and executors' accounts.
*/}}
{{- define "affinity.sparkPodLabels" -}}
{{- if .Values.spark.podLabels }}
{{- toYaml .Values.spark.podLabels }}
{{- else }}
affinity-spark-job: {{ include "affinity.fullname" . }}
{{- end }}
{{- end }}

{{- define "affinity.sparkDriverServiceAccountName" -}}
{{- default (printf "%s-spark-driver" (include "affinity.fullname" .)) .Values.spark.driver.serviceAccount.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "affinity.sparkExecutorServiceAccountName" -}}
{{- default (printf "%s-spark-executor" (include "affinity.fullname" .)) .Values.spark.executor.serviceAccount.name | trunc 63 | trimSuffix "-" }}
{{- end }}

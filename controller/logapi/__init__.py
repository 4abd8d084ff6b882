"""The log API: `taobrevjobs/log` served as an aggregated Kubernetes API (metrics-server's pattern).

kube-apiserver authenticates the user and proxies `/apis/logs.taobrev.io/v1alpha1/namespaces/NS/
taobrevjobs/NAME/log` here with the user in front-proxy headers; this server checks the proxy's
client certificate, asks a SubjectAccessReview for that user, and serves the running container's
log (one remote stream per job, shared by every viewer) or the archived log from S3.
"""

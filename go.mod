module github.com/envoy-shutdown-manager/shutdown-manager

go 1.26

# Switchyard image: the EPP (/epp, the entrypoint) and the per-site relay
# (/site-relay, for the multisite overlay), static binaries on a distroless
# base, running as the unprivileged user 65532 (the manifests expect it).
#   docker build -t registry.example.com/switchyard:v0.1.0 .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/epp ./cmd/epp && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/site-relay ./cmd/site-relay

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/epp /epp
COPY --from=build /out/site-relay /site-relay
USER 65532:65532
ENTRYPOINT ["/epp"]

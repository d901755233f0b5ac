# Switchyard EPP image: a static binary on a distroless base, running as
# the unprivileged user 65532 (manifests/base/deployment.yaml expects it).
#   docker build -t registry.example.com/switchyard:v0.1.0 .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/epp ./cmd/epp

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/epp /epp
USER 65532:65532
ENTRYPOINT ["/epp"]

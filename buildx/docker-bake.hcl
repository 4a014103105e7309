// qledge image targets for `docker buildx bake`. Run from the repository root:
//
//   docker buildx bake -f buildx/docker-bake.hcl                 # amd64 + arm64 + armv7 (group default)
//   docker buildx bake -f buildx/docker-bake.hcl validate        # launcher stage, all three arches
//   docker buildx bake -f buildx/docker-bake.hcl image-local     # host arch → qledge:local
//   docker buildx bake -f buildx/docker-bake.hcl armv7           # linux/arm/v7 alone
//   docker buildx bake -f buildx/docker-bake.hcl node            # node variants: amd64-node + arm64-node
//   docker buildx bake -f buildx/docker-bake.hcl image-local-node  # host arch → qledge:local-node
//   docker buildx bake -f buildx/docker-bake.hcl --print         # resolved JSON, no build
//   REGISTRY=ghcr.io/acme docker buildx bake -f buildx/docker-bake.hcl release --push
//
// Image targets need VERSION=$(scripts/version) in the environment: the version
// has one place (app/qledge/__init__.py), and the image build refuses a VERSION
// that is not the code's.
//
// Add --load to put them into the local engine (tags qledge:local-<arch>,
// qledge:local-<arch>-node). The node variant (VARIANT=node: the same image
// plus Node.js 24 LTS and npm) exists for amd64 and arm64 only (docs/image.md).
//
// Without a registry (the CI machine), build per-arch bases with
// `scripts/image base --platform …` and set BASE_PREFIX=qledge/base:bookworm:
// each target then starts FROM qledge/base:bookworm-<arch> (BuildKit must see
// those images: the "docker" driver does). scripts/image is
// what CI runs (the docker.io engine there has BuildKit but no buildx plugin).

variable "VERSION" {
  default = ""
}

// Base image of every stage (a multi-arch Debian bookworm slim image).
variable "BASE_IMAGE" {
  default = "debian:bookworm-slim"
}

// When set, per-arch local bases "<BASE_PREFIX>-<arch>" replace BASE_IMAGE.
variable "BASE_PREFIX" {
  default = ""
}

// With BASE_PREFIX: the build machine's own arch (amd64 | arm64). The node
// variant unpacks its wheel natively, on "<BASE_PREFIX>-<BUILD_ARCH>".
variable "BUILD_ARCH" {
  default = "amd64"
}

variable "REGISTRY" {
  default = ""
}

variable "SOURCE_URL" {
  default = ""
}

variable "REVISION" {
  default = ""
}

// A CA bundle for pip where TLS is intercepted (e.g. /etc/ssl/certs/ca-certificates.crt);
// mounted as a BuildKit secret for the pip step only, never stored in a layer.
variable "CA_BUNDLE" {
  default = ""
}

function "base" {
  params = [arch]
  result = BASE_PREFIX != "" ? "${BASE_PREFIX}-${arch}" : BASE_IMAGE
}

// image("1.2.3-amd64") → "qledge:1.2.3-amd64", or "<REGISTRY>/qledge:…" when REGISTRY is set.
function "image" {
  params = [tag]
  result = REGISTRY != "" ? "${REGISTRY}/qledge:${tag}" : "qledge:${tag}"
}

group "default" {
  targets = ["amd64", "arm64", "armv7"]
}

group "validate" {
  targets = ["launcher-amd64", "launcher-arm64", "launcher-armv7"]
}

group "node" {
  targets = ["amd64-node", "arm64-node"]
}

target "_common" {
  context    = "."
  dockerfile = "Containerfile"
  target     = "image"
  args = {
    VERSION          = VERSION
    SOURCE_URL       = SOURCE_URL
    REVISION         = REVISION
    VARIANT          = "default"
    // The node variant's native stage (a multi-arch BASE_IMAGE serves as is).
    BUILD_BASE_IMAGE = BASE_PREFIX != "" ? "${BASE_PREFIX}-${BUILD_ARCH}" : BASE_IMAGE
  }
  secret = compact([CA_BUNDLE != "" ? "id=ca,src=${CA_BUNDLE}" : ""])
}

target "amd64" {
  inherits  = ["_common"]
  platforms = ["linux/amd64"]
  args      = { BASE_IMAGE = base("amd64") }
  tags      = [image("${VERSION}-amd64"), "qledge:local-amd64"]
}

target "arm64" {
  inherits  = ["_common"]
  platforms = ["linux/arm64"]
  args      = { BASE_IMAGE = base("arm64") }
  tags      = [image("${VERSION}-arm64"), "qledge:local-arm64"]
}

// 32-bit ARM: no uvloop (its lock marker), msgspec built from its pinned sdist
// in the Containerfile's wheels stage (docs/image.md).
target "armv7" {
  inherits  = ["_common"]
  platforms = ["linux/arm/v7"]
  args      = { BASE_IMAGE = base("armv7") }
  tags      = [image("${VERSION}-armv7"), "qledge:local-armv7"]
}

// The node variant: the default image's layers + Node.js 24 LTS with npm.
target "_node" {
  args = { VARIANT = "node" }
}

target "amd64-node" {
  inherits = ["amd64", "_node"]
  tags     = [image("${VERSION}-amd64-node"), "qledge:local-amd64-node"]
}

target "arm64-node" {
  inherits = ["arm64", "_node"]
  tags     = [image("${VERSION}-arm64-node"), "qledge:local-arm64-node"]
}

// Host architecture, loaded into the local engine as qledge:local (compose.yaml uses it).
target "image-local" {
  inherits = ["_common"]
  tags     = ["qledge:local"]
  output   = ["type=docker"]
}

// The same with Node.js: qledge:local-node (compose.yaml's commented alternative).
target "image-local-node" {
  inherits = ["image-local", "_node"]
  tags     = ["qledge:local-node"]
}

// One multi-arch manifest (needs a registry: add --push).
target "release" {
  inherits  = ["_common"]
  platforms = ["linux/amd64", "linux/arm64", "linux/arm/v7"]
  tags      = [image(VERSION), image("latest")]
}

// The node variant's manifest: amd64 and arm64 (no Node.js build for arm/v7).
target "release-node" {
  inherits  = ["_common", "_node"]
  platforms = ["linux/amd64", "linux/arm64"]
  tags      = [image("${VERSION}-node"), image("node")]
}

// Only the static launcher stage: compiles and checks ql-launch per arch.
target "launcher-amd64" {
  inherits  = ["_common"]
  target    = "launcher"
  platforms = ["linux/amd64"]
  args      = { BASE_IMAGE = base("amd64") }
  output    = ["type=cacheonly"]
}

target "launcher-arm64" {
  inherits  = ["_common"]
  target    = "launcher"
  platforms = ["linux/arm64"]
  args      = { BASE_IMAGE = base("arm64") }
  output    = ["type=cacheonly"]
}

target "launcher-armv7" {
  inherits  = ["_common"]
  target    = "launcher"
  platforms = ["linux/arm/v7"]
  args      = { BASE_IMAGE = base("armv7") }
  output    = ["type=cacheonly"]
}

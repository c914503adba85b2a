# The hostpath CSI plugin as a system job: one monolith plugin (controller and node) per client,
# volumes as directories under `root`. `--shared` says every client sees the same root (one machine
# or a network file system), so volumes may be used on any of them.
#
#   caravan job run -var caravan=$(pwd)/target/debug/caravan examples/csi-hostpath.nomad.hcl
#   caravan plugin status
variable "caravan" {
  type        = string
  description = "Absolute path of the caravan binary (raw_exec runs it on the host)"
  default     = "/usr/local/bin/caravan"
}

variable "root" {
  type    = string
  default = "/tmp/caravan-hostpath"
}

job "csi-hostpath" {
  type = "system"

  group "plugin" {
    task "plugin" {
      driver = "raw_exec"

      config {
        command = var.caravan
        args    = ["csi-hostpath", "--root", var.root, "--node-id", "${node.unique.name}", "--shared"]
      }

      csi_plugin {
        id        = "hostpath"
        type      = "monolith"
        mount_dir = "/csi"
      }

      resources {
        cpu    = 50
        memory = 64
      }
    }
  }
}

# A job that writes to the `data` volume (examples/volume.hcl) from an exec task (run as root).
#
#   caravan job run examples/volume-user.nomad.hcl
#   caravan volume status data
job "volume-user" {
  group "app" {
    volume "data" {
      type            = "csi"
      source          = "data"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }

    task "app" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "date >> /data/visits; cat /data/visits; sleep 3600"]
      }

      volume_mount {
        volume      = "data"
        destination = "/data"
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}

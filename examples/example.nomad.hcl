# An example job, as `caravan job init` writes it.
#   caravan job validate example.nomad.hcl      checks it
#   caravan job run -output example.nomad.hcl   prints the JSON the API takes
job "example" {
  # Where the job may run. "*" matches every datacenter.
  datacenters = ["*"]

  # service jobs run until stopped; batch jobs run to completion.
  type = "service"

  group "app" {
    count = 1

    network {
      # A dynamic port: the scheduler picks a free one and passes it as NOMAD_PORT_http.
      port "http" {}
    }

    restart {
      attempts = 2
      interval = "30m"
      delay    = "15s"
      mode     = "fail"
    }

    task "server" {
      # raw_exec runs a command on the host without isolation; enabled in -dev mode.
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"serving on ${NOMAD_PORT_http}\"; exec sleep 3600"]
      }

      env {
        GREETING = "hello from ${NOMAD_JOB_NAME}"
      }

      resources {
        cpu    = 100 # MHz
        memory = 64  # MB
      }
    }
  }
}

job "example" {
  group "app" {
    task "server" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "exec sleep 3600"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}

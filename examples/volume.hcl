# A volume for the hostpath plugin (examples/csi-hostpath.nomad.hcl):
#
#   caravan volume create examples/volume.hcl
#   caravan volume status data
id        = "data"
name      = "data"
type      = "csi"
plugin_id = "hostpath"

capacity_min = "10MiB"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

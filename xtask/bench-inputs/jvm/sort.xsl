<?xml version="1.0"?>
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="text"/>
  <xsl:template match="/items">
    <xsl:for-each select="item">
      <xsl:sort select="@price" data-type="number"/>
      <xsl:sort select="name"/>
      <xsl:if test="position() mod 1000 = 1">
        <xsl:value-of select="concat(name, ' ', @price, ' ', string-length(desc), '&#10;')"/>
      </xsl:if>
    </xsl:for-each>
    <xsl:value-of select="concat('total ', sum(item/@price), '&#10;')"/>
  </xsl:template>
</xsl:stylesheet>
